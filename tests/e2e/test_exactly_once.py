"""Exactly-once under failure: the two-stage access-log job (a one-minute event-time window) on
RocksDB state (incremental checkpoints, each captured copy-on-write while records keep flowing),
its second stage on three workers, killed with SIGKILL at many points.

Every attempt of the job is killed once at a different point of the checkpoint protocol or while
its timers fire (the worker SIGKILLs itself there, see ``tidemark.runtime.job.faults``): the
one-worker first stage after a write to the key-group-partitioned channel; one of the three
workers of the second stage while its sink's transaction is written and not committed, after it
committed (the other workers may not have), and while its timers fire. The supervisor restores all
stages from the newest completed checkpoint each time: the workers not killed in place, the killed
one's successor from its stage's warm standby. Input keeps arriving throughout, every 97th record
truncated. The first stage's input is parsed by Spark (its ``SparkStep``: ``from_json`` on the
record schema), which leaves the truncated records to the dead-letter topic with their origin. At
the end, read_committed output must hold each closed minute's top URLs exactly once, record by
record, equal to those computed from the well-formed input, and every truncated record is
dead-lettered.

A barrier half aligned, a worker killed after its snapshot and a sink pre-committed, not
committed, are killed in ``test_job_graph.py`` and ``test_changelog_exactly_once.py``; a first
stage's timers mid-round in ``test_rules_and_enrichment.py``; a worker killed mid-stream, no
checkpoint in progress, in ``test_chaos.py`` and the demo (``test_demo.py``).
"""

from __future__ import annotations

import pytest

from pipeline_support import (TOP_URLS, dead_letters, killed_at_every_point, pipeline, topics_for, verify_two_stage,
                              worker_deaths)
from tidemark.kafka.topics import TopicNames
from tidemark.local.pipeline import InputFeeder, stage_logs

pytestmark = pytest.mark.timeout(900)

# the first attempt kills the first stage, so that the second stage's standby warms before one of
# its workers is killed
KILLS = (
    "0@minute_counts@after-channel-write:2",  # a batch of the key-group-partitioned channel written
    "1@top_urls.w0@during-commit:1",  # one worker's sink transaction written, not committed
    "2@top_urls.w1@after-commit:1",  # one worker committed; the others may not have
    "3@top_urls.w2@during-timer-firing:2",  # a minute's window emitted and cleared, not checkpointed
)


def test_two_stage_job_on_four_workers_is_exactly_once_across_sigkills_of_one_worker(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, standby=True,  # the killed worker's successor warms
                  env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2500"}) as pipe:  # while the attempt before runs
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, topics.args(parallelism=3, top_urls_workers=3, spark_step=True,
                                                     state_backend="rocksdb"), faults=KILLS,
                             max_restarts=len(KILLS) + 2)
        all_killed = lambda: killed_at_every_point(job, KILLS)  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1000, chunk=50, pause_s=1.0, malformed_every=97,
                             until=all_killed).start()  # 50 records/s: each restored attempt's backlog stays short
        records = feeder.join(timeout_s=780)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        truncated = [r for r in records if not r.endswith(b"}")]
        letters = dead_letters(kafka_bootstrap, TopicNames(pipe.cluster.topic_prefix).dead_letters, len(truncated), timeout_s=60)
        failures = worker_deaths(job)
        restores = job.events("restore issued")
        in_place = job.events("a released worker takes the attempt in place")
        from_standby = job.events("a warm standby takes the attempt")
        started = job.events("starting attempt")
        registered = job.events("attempt registered")
        logs = stage_logs(pipe.home)
        job.stop()
    assert started[0]["workers"] == {"minute_counts": 1, "top_urls": 3}
    assert registered[0]["tasks"] == 6
    assert [f["stage"] for f in failures] == [k.split("@")[1] for k in KILLS], failures
    assert len(restores) >= len(KILLS) - 1  # the first kill may come before any checkpoint completed
    # the 3 processes not killed restore in place at each failover; only one still starting (the
    # last kill's new process) may be too slow to end its attempt and be replaced
    assert len(in_place) >= 2 * len(KILLS), in_place
    assert from_standby, "no killed worker's successor was its stage's standby"
    assert {"minute_counts.log", "top_urls.w0.log", "top_urls.w1.log", "top_urls.w2.log"} <= set(logs)
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
    # at least once each (a record reprocessed after a restore is dead-lettered again), with its origin
    assert {(d.origin_topic, d.error_type) for d in letters} == {(topics.input, "spark-step-rejected")}
    assert len({(d.origin_partition, d.origin_offset) for d in letters}) == len(truncated) > 5
    assert {d.value for d in letters} == set(truncated)
