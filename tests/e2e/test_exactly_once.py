"""Exactly-once under failure: the two-stage access-log job (a one-minute event-time window),
killed with SIGKILL at many points.

Every attempt of the job is killed once at a different point of the checkpoint protocol or while
its timers fire (the worker SIGKILLs itself there, see ``tidemark.runtime.job.faults``); the
supervisor restores all stages from the newest completed checkpoint each time. Input keeps
arriving throughout. At the end, read_committed output must hold each closed minute's top URLs
exactly once, equal to those computed from the input.

The sink's commit protocol points (during alignment, after the ack, during and after the commit)
and a kill mid-stream are made across three workers of a stage in ``test_scale_out.py``, which
runs the same code per task; this test keeps the points only a one-worker job or the first stage
reaches (its snapshot, timers firing in either stage).
"""

from __future__ import annotations

import pytest

from pipeline_support import TOP_URLS, pipeline, topics_for, verify_two_stage, worker_deaths
from tidemark.local.pipeline import InputFeeder

pytestmark = pytest.mark.timeout(900)

KILLS = (
    "0@minute_counts@after-snapshot:2",  # state written, not acked
    "1@top_urls@during-timer-firing:2",  # a minute's window emitted and cleared, not checkpointed
    "2@minute_counts@during-timer-firing:40",  # minutes' counts dropped by their timers, mid-round
)


def test_two_stage_job_is_exactly_once_across_sigkills(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, standby=True,
                  env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "1500"}) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, topics.args(), faults=KILLS, max_restarts=len(KILLS) + 2)
        all_killed = lambda: len(job.events("starting attempt")) > len(KILLS) or job.process.poll() is not None  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=4000, chunk=100, pause_s=0.5,
                             until=all_killed).start()  # input flows until every kill happened
        records = feeder.join(timeout_s=720)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        failures = worker_deaths(job)
        restores = job.events("restore issued")
        taken_over = job.events("a warm standby takes the attempt")
        job.stop()
    assert len(failures) == len(KILLS), [(f["stage"], f["epoch"]) for f in failures]
    assert taken_over, "no attempt was taken over by a warm standby"
    assert len(restores) >= len(KILLS) - 1  # the first kill may come before any checkpoint completed
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
