"""Stop-with-savepoint and restore at another parallelism; at-least-once mode. (Killed services: the
fault campaign in ``test_chaos.py``, which also checks retention afterwards.)"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipeline_support import (
    TOP_URLS,
    pipeline,
    stage_pids,
    stopped,
    topics_for,
    verify_two_stage,
    worker_deaths,
)
from tidemark.local.pipeline import wait_for
from tidemark.examples.generator import expected_top_urls, generate, produce
from tidemark.examples.access_log import minute_of
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.kafka.metadata import records_in
from tidemark.local.pipeline import InputFeeder, acked_checkpoints, stage_logs
from upgraded_jobs import RENAMED_TOP_URLS, UPGRADED_ENV

pytestmark = pytest.mark.timeout(900)


def test_stop_with_savepoint_then_restore_at_another_parallelism(tmp_path, kafka_bootstrap, unique_name):
    """Parallelism 2 with ``top_urls`` on 2 workers, stopped with a savepoint, restored at
    parallelism 3 on 3 workers; stopped with a savepoint again, which a job with the second stage
    renamed may restore only with ``--allow-non-restored-state``."""
    topics = topics_for(unique_name)
    first, second = list(generate(3000, seed=11, per_minute=500)), list(generate(3000, seed=12, per_minute=500,
                                                                                 first=3000))
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        produce(kafka_bootstrap, topics.input, first, 4)
        job = pipe.start_job(TOP_URLS, topics.args(parallelism=2, top_urls_workers=2))
        read_committed(kafka_bootstrap, topics.output, expect=len(expected_top_urls(first)), timeout_s=240, settle_s=0)
        _a_target_refused_at_write_time_fails_the_savepoint_not_a_worker(pipe, job, topics.job_id)
        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        savepoint = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert savepoint["status"] == "COMPLETED", savepoint
        assert job.wait(timeout_s=120) == 0  # every stage finished after the savepoint completed
        produce(kafka_bootstrap, topics.input, second, 4)
        rescaled = pipe.start_job(TOP_URLS, topics.args(parallelism=2, top_urls_workers=3), parallelism=3,
                                  from_savepoint=savepoint["metadata_path"])
        verdict = verify_two_stage(kafka_bootstrap, topics, first + second, timeout_s=300)
        attempts = rescaled.events("starting attempt")
        request = client.trigger_savepoint(topics.job_id, stop=True)
        again = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert again["status"] == "COMPLETED" and rescaled.wait(timeout_s=120) == 0, again
        _a_renamed_stage_is_refused_unless_its_state_may_be_dropped(pipe, topics, again, first + second, unique_name)
    assert attempts[0]["parallelism"] == 3 and attempts[0]["restore"] == savepoint["metadata_path"]
    assert attempts[0]["workers"] == {"minute_counts": 1, "top_urls": 3}
    assert verdict.exactly_once, verdict


def _a_renamed_stage_is_refused_unless_its_state_may_be_dropped(pipe, topics, savepoint, records,  # noqa: ANN001
                                                                unique_name) -> None:
    """Issue #33: the second stage renamed (``top_urls`` -> ``top_urls_v2``), so no stage claims the
    savepoint's ``top_urls`` state. The start exits 3 with one line naming that stage and its
    state. With ``--allow-non-restored-state`` it starts and says what it dropped; the renamed
    stage starts empty and reads its channel from the restore on (``minute_counts`` is restored),
    so the output topic gets each minute of the new input once and nothing again: only the minute
    still open at the savepoint, whose counts were ``top_urls`` state, is lost with that state."""
    refused = pipe.start_job(RENAMED_TOP_URLS, topics.args(), from_savepoint=savepoint["metadata_path"],
                             env=UPGRADED_ENV)
    code = refused.wait(timeout_s=120)
    log_text = refused.log_path.read_text(errors="replace")
    assert code == 3, log_text[-3000:]
    [line] = [line for line in log_text.splitlines() if line.startswith("tidemark jobs run: ")]
    assert line.startswith(f"tidemark jobs run: savepoint {savepoint['savepoint_id']} of job {topics.job_id} "
                           "holds state no stage of the job claims: stage 'top_urls' (keyed state and timers, "), line
    assert line.endswith("start with --allow-non-restored-state to drop that state"), line
    assert refused.events("starting attempt") == []
    renamed = pipe.start_job(RENAMED_TOP_URLS, topics.args(), from_savepoint=savepoint["metadata_path"],
                             allow_non_restored_state=True, env=UPGRADED_ENV)
    more = list(generate(2000, seed=14, per_minute=500, first=len(records)))
    produce(pipe.bootstrap, topics.input, more, 4)
    open_at_savepoint = {minute_of(int(json.loads(r)["ts"])) for r in records} - set(expected_top_urls(records))
    expected = {m: tops for m, tops in expected_top_urls(records + more).items() if m not in open_at_savepoint}
    output = read_committed(pipe.bootstrap, topics.output, expect=len(expected), timeout_s=240)
    dropped = renamed.events("restoring without the state no stage claims: it is dropped")
    attempts = renamed.events("starting attempt")
    renamed.stop()
    assert len(dropped) == 1 and dropped[0]["dropped"].startswith("stage 'top_urls' ("), dropped
    assert attempts[0]["restore"] == savepoint["metadata_path"]
    assert open_at_savepoint, "the savepoint was expected to hold an open minute"
    verdict = verify_top_urls(output, expected)
    assert verdict.exactly_once and verdict.records == verdict.expected_records, verdict


def _a_target_refused_at_write_time_fails_the_savepoint_not_a_worker(pipe, job, job_id: str) -> None:
    """Issue #32: a target the API accepted but storage refused when the source worker wrote the
    savepoint killed that worker and failed the job over, the request ending as JOB_FINISHED.
    Now the worker declines the savepoint, which fails with the reason, and no worker dies: a
    target that became a file after the 202 (while the workers were held), which the worker's
    check refuses, and a target holding a file where the stage's folder goes, which the write
    itself fails on."""
    client, storage = pipe.client(), pipe.home / "checkpoints"
    became_a_file, holds_a_file = f"{job_id}/savepoints/before-upgrade", f"{job_id}/savepoints/cluttered"
    (storage / holds_a_file).mkdir(parents=True)
    (storage / holds_a_file / "minute_counts").write_bytes(b"a file where the source stage's folder goes")
    with stopped(*stage_pids(pipe.home).values()):
        request = client.trigger_savepoint(job_id, target=became_a_file)
        (storage / became_a_file).write_bytes(b"a file where the savepoint's directory goes")
    refused = client.wait_for_savepoint(job_id, request["request_id"], timeout_s=120)
    request = client.trigger_savepoint(job_id, target=holds_a_file)
    not_written = client.wait_for_savepoint(job_id, request["request_id"], timeout_s=120)
    for failed in (refused, not_written):
        assert failed["status"] == "FAILED" and failed["savepoint_id"] is not None, failed
        assert failed["failure_reason"].startswith("DECLINED: minute_counts#"), failed
    assert refused["failure_reason"].endswith(
        f": savepoint target refused: '{became_a_file}' is an existing file, not a directory"), refused
    assert f": savepoint not written to target '{holds_a_file}': NotADirectoryError: " in not_written["failure_reason"]
    assert worker_deaths(job) == [] and job.events("restore issued") == []


def test_at_least_once_skips_alignment_and_duplicates_only_after_the_last_checkpoint(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    # checkpoints are triggered while earlier ones wait for the second stage's acks: their barriers
    # go into the channel between the records the first stage writes while the second is held back
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000", "TIDEMARK_CHECKPOINT__MAX_CONCURRENT": "4"}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env=env) as pipe:
        pipe.create_topic(topics.input, 4)
        # ``top_urls`` on two workers, each with its own batches of at most 24 records; worker 0 is
        # killed mid-stream, past the last checkpoint
        job = pipe.start_job(TOP_URLS, topics.args(mode="AT_LEAST_ONCE", top_urls_batch_records=24,
                                                   top_urls_workers=2),
                             faults=("0@top_urls@after-batch:12",))
        wait_for(lambda: len(stage_pids(pipe.home, "top_urls.w*")) == 2, 300, "both top_urls workers running")
        # 960 records, 80 per minute of event time: 12 minutes, so both workers get minutes,
        # spread over the channel's partitions (a worker overtakes a barrier only between partitions)
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=960, chunk=80, pause_s=0.3, per_minute=80).start()
        # the second stage is held back while the first writes half the input into the channel: it
        # then reads a backlog with several checkpoints' barriers in it 24 records at a time, so
        # the barriers of one checkpoint reach a worker in different batches, with records after
        # them on the partitions read first - what alignment would hold back (without the hold,
        # the second stage keeps up or not depending on the machine's load)
        with stopped(*stage_pids(pipe.home, "top_urls.w*").values()):
            wait_for(lambda: records_in({"bootstrap.servers": kafka_bootstrap}, topics.channel) >= 480, 300,
                     "half the input in the channel")
        records = feeder.join(600)
        wait_for(lambda: job.events("restore issued"), 600, "the restore after the kill")
        restored_id = job.events("restore issued")[0]["checkpoint"]
        expected = expected_top_urls(records)
        wanted = set(expected)

        def every_result_written():  # repeated results count too, so wait for the identities
            out = read_committed(kafka_bootstrap, topics.output, expect=len(wanted), timeout_s=30, settle_s=2)
            return out if wanted <= {r["minute"] for r in out} else None

        output = wait_for(every_result_written, 420, "every expected result")
        history = {c["id"]: c for c in pipe.client().history(topics.job_id)["checkpoints"]}
        logs = stage_logs(tmp_path / "home")
        job.stop()
    acks = [a for name, text in logs.items() if name.startswith("top_urls") for a in acked_checkpoints(text)]
    assert acks and all(a["alignment_ms"] == 0 and a["held"] == 0 for a in acks)  # nothing ever waited
    assert sum(a["overtaken"] for a in acks) > 0  # records were processed past early barriers
    identities = Counter(r["minute"] for r in output)
    assert wanted <= set(identities)  # nothing lost
    # each minute's final top is among its copies: the first stage's counts are replayed as they
    # were and the window keeps each URL's largest count, so a window fired again is right again
    # unless it fired on records past an early barrier (at-least-once: then it may fire once more)
    assert all(any(r["top"] == expected[r["minute"]] for r in output if r["minute"] == m) for m in wanted)
    # what a replay added: windows closed again after the restore (there may be none: only a window
    # that closed between the restored checkpoint and the kill closes again, and with one output
    # per minute that interval may hold none)
    repeated = {identity for identity, count in identities.items() if count > 1} | (set(identities) - wanted)
    # every repeated result was first written after the restored checkpoint was triggered
    trigger_ms = history[restored_id]["triggered_at"]
    first_copies = _first_write_times(kafka_bootstrap, topics.output, repeated)
    assert set(first_copies) == repeated
    assert all(t >= trigger_ms - 1000 for t in first_copies.values()), (trigger_ms, sorted(first_copies.values())[:3])


def _first_write_times(bootstrap, topic, identities):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.partitions])
    first = {}
    idle = 0
    while idle < 5:
        batch = consumer.consume(1000, 0.5)
        idle = 0 if batch else idle + 1
        for record in batch:
            if record.error() is None:
                doc = json.loads(record.value())
                identity = doc["minute"]
                if identity in identities:
                    first[identity] = min(first.get(identity, record.timestamp()[1]), record.timestamp()[1])
    consumer.close()
    return first
