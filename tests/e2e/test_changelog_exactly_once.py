"""Exactly-once with the changelog state backend: SIGKILLs at three points, materializations and
truncation running alongside (issue #5); then a savepoint of it, resumed rescaled.

The two-stage job runs with ``changelog=true`` and the RocksDB backend: every state mutation is
appended to the operator's changelog topic, checkpoints persist and ack changelog ranges only,
and the materializer folds completed checkpoints into materialized snapshots that later
checkpoints reference. One attempt is killed right after its changelog entries reached Kafka
past the last completed checkpoint (they must never be applied on recovery). Spark parses the
first stage's input (its ``SparkStep``), as in ``test_exactly_once.py``.
"""

from __future__ import annotations

import pytest

from pipeline_support import TOP_URLS, killed_at_every_point, pipeline, topics_for, verify_two_stage, worker_deaths
from tidemark.examples.generator import generate, produce
from tidemark.local.pipeline import InputFeeder, json_events, wait_for

pytestmark = pytest.mark.timeout(900)

KILLS = (
    "0@minute_counts@after-changelog-write:3",  # changes past the last completed checkpoint are in Kafka
    "1@top_urls@after-snapshot:2",  # changelog persisted for the checkpoint, not acked
    "2@top_urls@after-ack:2",  # between pre-commit and commit
)
SERVICES = ("coordinator", "checkpoint-store", "changelog", "materializer")


def test_changelog_mode_is_exactly_once_across_sigkills_then_resumes_rescaled_from_a_savepoint(
        tmp_path, kafka_bootstrap, unique_name):
    """``top_urls`` runs on two workers (``top_urls`` in a fault is its worker 0): each worker
    appends its own tasks' changes to the changelog and restores exactly its own ranges. Then a
    savepoint of the changelog-mode job, self-contained (canonical state, no changelog ranges):
    the job resumes from it at another parallelism, again in changelog mode, and its checkpoints
    and materializations go on from there: from 2 tasks on 2 workers of ``top_urls`` to 3 tasks
    on 3 workers."""
    topics = topics_for(unique_name)
    args = topics.args(changelog=True, state_backend="rocksdb", top_urls_workers=2, spark_step=True)  # Spark parses
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2500", "TIDEMARK_MATERIALIZATION__INTERVAL_MS": "3000"}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, services=SERVICES, env=env, standby=True) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, args, faults=KILLS, max_restarts=len(KILLS) + 2)
        all_killed = lambda: killed_at_every_point(job, KILLS)  # noqa: E731
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=4000, chunk=200, pause_s=1.0, until=all_killed)
        records = feeder.start().join(timeout_s=720)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        failures = worker_deaths(job)
        started = job.events("starting attempt")
        materializer_log = tmp_path / "home" / "logs" / "materializer.log"
        materialized_alongside = '"event": "materialized"' in materializer_log.read_text(errors="replace")

        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        savepoint = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert savepoint["status"] == "COMPLETED", savepoint
        assert job.wait(timeout_s=120) == 0
        saved = client.history(topics.job_id)["checkpoints"]
        more = list(generate(2000, seed=22, per_minute=feeder.per_minute, first=len(records)))
        produce(kafka_bootstrap, topics.input, more, 4)
        resumed = pipe.start_job(TOP_URLS, {**args, "top_urls_workers": 3}, parallelism=3, standby=False,
                                 from_savepoint=savepoint["metadata_path"])
        resumed_verdict = verify_two_stage(kafka_bootstrap, topics, records + more, timeout_s=300)
        newest = max(c["id"] for c in saved)

        def materialized_after_resume():  # including a task that exists at parallelism 3 only
            found = [e for e in json_events(materializer_log.read_text(errors="replace"))
                     if e.get("event") == "materialized" and e["job"] == topics.job_id and e["checkpoint"] > newest]
            return found if any(e["task"].endswith("#2") for e in found) else None

        wait_for(lambda: [c for c in client.history(topics.job_id)["checkpoints"]
                          if c["id"] > newest and c["status"] == "COMPLETED"], 120,
                 "a completed checkpoint of the resumed job")
        wait_for(materialized_after_resume, 120, "a materialization of the resumed job's third task")
        attempts = resumed.events("starting attempt")
        resumed.stop()
    assert started[0]["workers"] == {"minute_counts": 1, "top_urls": 2}
    assert len(failures) == len(KILLS), [(f["stage"], f["epoch"]) for f in failures]
    assert verdict.exactly_once, verdict
    assert materialized_alongside  # materializations ran alongside the kills
    assert attempts[0]["parallelism"] == 3 and attempts[0]["restore"] == savepoint["metadata_path"]
    assert attempts[0]["workers"] == {"minute_counts": 1, "top_urls": 3}
    assert resumed_verdict.exactly_once, resumed_verdict
    assert resumed_verdict.records == resumed_verdict.expected_records
