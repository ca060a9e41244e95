"""Stages spread over several worker processes (issue #14): each worker owns a block of its stage's
tasks, records reach it through Kafka partitioned by key group, and the checkpoint protocol runs
across the workers as it does in one.

* the two-stage job with its second stage on 3 workers, SIGKILLed at every fault point, one
  worker at a time, input arriving all the time: the read_committed output is exact record by
  record;
* the same job rescaled through savepoints from one worker per stage to two (its source stage then
  reads through an exchange, ``runtime.physical_plan``) and back to one.
"""

from __future__ import annotations

import pytest

from pipeline_support import TOP_URLS, pipeline, topics_for, verify_two_stage, worker_deaths
from tidemark.examples.generator import expected_top_urls, generate, produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import InputFeeder, stage_logs

pytestmark = pytest.mark.timeout(900)

KILLS = (  # a worker's state written, not acked: test_exactly_once.py and test_changelog_exactly_once.py
    "0@top_urls.w1@during-alignment:2",  # one worker of three has a channel's barrier n, not all
    "1@top_urls.w2@after-ack:1",  # pre-committed, not committed, by one worker of three
    "2@top_urls.w0@during-commit:1",  # one worker's sink transaction written, not committed
    "3@top_urls.w1@after-commit:1",  # one worker committed; the others may not have
    "4@minute_counts@after-channel-write:2",  # a batch of the key-group-partitioned channel written
    "5@top_urls.w2@after-batch:2",  # mid-stream, no checkpoint in progress
)


def test_a_stage_over_three_workers_is_exactly_once_across_sigkills_of_one_worker(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, standby=True,  # the killed worker's successor warms
                  env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "1500"}) as pipe:  # while the attempt before runs
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, topics.args(parallelism=3, top_urls_workers=3), faults=KILLS,
                             max_restarts=len(KILLS) + 2)
        all_killed = lambda: len(job.events("starting attempt")) > len(KILLS) or job.process.poll() is not None  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1000, chunk=25, pause_s=0.5,
                             until=all_killed).start()  # 50 records/s: each restored attempt's backlog stays short
        records = feeder.join(timeout_s=780)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        failures = worker_deaths(job)
        in_place = job.events("a released worker takes the attempt in place")
        from_standby = job.events("a warm standby takes the attempt")
        started = job.events("starting attempt")
        registered = job.events("attempt registered")
        logs = stage_logs(pipe.home)
        job.stop()
    assert started[0]["workers"] == {"minute_counts": 1, "top_urls": 3}
    assert registered[0]["tasks"] == 6
    assert [f["stage"] for f in failures] == [k.split("@")[1] for k in KILLS], failures
    # the 3 processes not killed restore in place at each failover; only one still starting (the
    # last kill's new process) may be too slow to end its attempt and be replaced
    assert len(in_place) >= 2 * len(KILLS), in_place
    assert from_standby, "no killed worker's successor was its stage's standby"
    assert {"minute_counts.log", "top_urls.w0.log", "top_urls.w1.log", "top_urls.w2.log"} <= set(logs)
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def test_savepoints_rescale_between_one_worker_per_stage_and_several(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    parts = [list(generate(1500, seed=seed, per_minute=500, first=1500 * i)) for i, seed in enumerate((21, 22, 23))]
    sent: list[bytes] = []
    savepoint = None
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        client = pipe.client()
        for part, workers in zip(parts, (1, 2, 1)):  # one worker each -> two (exchange) -> one again
            produce(kafka_bootstrap, topics.input, part, 4)
            sent += part
            job = pipe.start_job(TOP_URLS, topics.args(parallelism=2, workers=workers), from_savepoint=savepoint)
            read_committed(kafka_bootstrap, topics.output, expect=len(expected_top_urls(sent)), timeout_s=240,
                           settle_s=0)
            request = client.trigger_savepoint(topics.job_id, stop=True)
            done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
            assert done["status"] == "COMPLETED", done
            assert job.wait(timeout_s=120) == 0, "every worker finishes after the savepoint"
            assert job.events("starting attempt")[0]["workers"]["top_urls"] == workers
            savepoint = done["metadata_path"]
        verdict = verify_two_stage(kafka_bootstrap, topics, sent, timeout_s=120)
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
