"""Stages spread over several worker processes (issue #14): each worker owns a block of its stage's
tasks, records reach it through Kafka partitioned by key group, and the checkpoint protocol runs
across the workers as it does in one. Here: the two-stage job rescaled through savepoints from
parallelism 2 on one worker per stage to 3 on two (its source stage then reads through an
exchange, ``runtime.job.physical_plan``) and back to 2 on one, as a job with a stage renamed; on
the way, a savepoint target refused at write time. (The same job with its second stage on 3
workers, SIGKILLed one worker at a time, is ``test_exactly_once.py``'s.)
"""

from __future__ import annotations

import json

import pytest

from confluent_kafka import Producer

from pipeline_support import (TOP_URLS, dead_letters, pipeline, stage_pids, stopped, topics_for, verify_two_stage,
                              worker_deaths)
from tidemark.api import key_partition
from tidemark.examples.access_log import minute_of
from tidemark.examples.generator import by_url, expected_top_urls, generate, produce
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.processes import pid_alive
from tidemark.runtime.job.physical_plan import READER_SUFFIX
from upgraded_jobs import RENAMED_TOP_URLS, UPGRADED_ENV

pytestmark = pytest.mark.timeout(900)


def test_savepoints_rescale_between_one_worker_per_stage_and_several(tmp_path, kafka_bootstrap, unique_name):
    """Parallelism 2 on one worker per stage, stopped with a savepoint, restored at parallelism 3 on
    two workers per stage (the source stage reading through an exchange, whose readers run its Spark
    step and forward the rows; the workers fused: each reader in its stage worker's process, so
    the savepoints restore across both layouts), stopped with a savepoint again: the output
    exactly once record by record. A savepoint target refused at write time fails
    that savepoint, not a worker; and the last savepoint restores at parallelism 2 on one worker
    per stage into a job with a stage renamed, only with --allow-non-restored-state."""
    topics = topics_for(unique_name)
    parts = [list(generate(1500, seed=seed, per_minute=500, first=1500 * i)) for i, seed in enumerate((21, 22))]
    sent: list[bytes] = []
    savepoint = None
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        client = pipe.client()
        for part, parallelism, workers in zip(parts, (2, 3), (1, 2)):
            produce(kafka_bootstrap, topics.input, part, 4)
            sent += part
            # Spark parses the input (a SparkStep): through the exchange, its reader forwards the rows
            job = pipe.start_job(TOP_URLS, topics.args(parallelism=2, workers=workers, spark_step=True),
                                 parallelism=parallelism, from_savepoint=savepoint, fused=workers > 1)
            read_committed(kafka_bootstrap, topics.output, expect=len(expected_top_urls(sent)), timeout_s=240,
                           settle_s=0)
            if savepoint is None:  # the source stage writes the savepoint's first state files
                _a_target_refused_at_write_time_fails_the_savepoint_not_a_worker(pipe, job, topics.job_id)
            request = client.trigger_savepoint(topics.job_id, stop=True)
            done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
            assert done["status"] == "COMPLETED", done
            assert job.wait(timeout_s=120) == 0, "every worker finishes after the savepoint"
            [attempt, *_] = job.events("starting attempt")
            assert (attempt["parallelism"], attempt["workers"]["top_urls"]) == (parallelism, workers)
            assert attempt["restore"] == savepoint
            if workers > 1:  # fused: a process per worker, each reader a lane of its stage worker's process
                runs = pipe.home / "runs"
                ready = {p.name.split(".epoch")[0]: json.loads(p.read_text())["stages"]
                         for p in runs.glob("*/minute_counts.w*.ready")}
                assert ready == {f"minute_counts.w{w}": ["minute_counts" + READER_SUFFIX, "minute_counts"]
                                 for w in range(workers)}, ready
                assert not list(runs.glob(f"*/minute_counts{READER_SUFFIX}*.ready"))  # no reader process
            savepoint = done["metadata_path"]
        verdict = verify_two_stage(kafka_bootstrap, topics, sent, timeout_s=120)
        _a_renamed_stage_is_refused_unless_its_state_may_be_dropped(pipe, topics, done, sent)
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def _a_renamed_stage_is_refused_unless_its_state_may_be_dropped(pipe, topics, savepoint, records) -> None:  # noqa: ANN001
    """Issue #33: the second stage renamed (``top_urls`` -> ``top_urls_v2``), so no stage claims the
    savepoint's ``top_urls`` state; the job back at parallelism 2 on one worker per stage. The start exits 3 with one line naming that stage and its
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
    assert (attempts[0]["parallelism"], attempts[0]["workers"]) == (2, {"minute_counts": 1, "top_urls_v2": 1})
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
    running = [pid for pid in stage_pids(pipe.home).values() if pid_alive(pid)]  # not the runs before
    with stopped(*running):
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


def test_a_co_partitioned_input_is_read_without_an_exchange_and_rescales_through_one(tmp_path, kafka_bootstrap,
                                                                                      unique_name):
    """The two-stage job's input written by URL into the partitions of its key groups (``by_url``)
    and declared co-partitioned: at parallelism 4 on two workers its first stage runs no exchange
    reader, each worker reading the 2 partitions of its key groups, and a record written into a
    wrong partition is dead-lettered; stopped with a savepoint and restored at parallelism 3 (4
    partitions do not divide among its 2 workers by key group) it reads through the exchange, and
    back at parallelism 2 directly again: the output exactly once record by record."""
    topics = topics_for(unique_name)
    dead_letter_topic = TopicNames(unique_name("tm")).dead_letters
    parts = [list(generate(1000, seed=seed, per_minute=500, first=1000 * i)) for i, seed in enumerate((31, 32, 33))]
    sent: list[bytes] = []
    savepoint = None
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        client = pipe.client()
        stray = json.loads(parts[0][0])  # a valid record of another key group than its partition's
        wrong = next(p for p in range(4) if p != key_partition(stray["url"], 4))
        (origin,) = [(topics.input, wrong, offset) for offset in produce_at(kafka_bootstrap, topics.input, wrong,
                                                                            json.dumps(stray).encode())]
        for part, parallelism, direct in zip(parts, (4, 3, 2), (True, False, True)):
            produce(kafka_bootstrap, topics.input, part, partition_of=by_url(4))
            sent += part
            job = pipe.start_job(TOP_URLS, topics.args(parallelism=2, workers=2, co_partitioned=True),
                                 parallelism=parallelism, from_savepoint=savepoint)
            read_committed(kafka_bootstrap, topics.output, expect=len(expected_top_urls(sent)), timeout_s=240,
                           settle_s=0)
            request = client.trigger_savepoint(topics.job_id, stop=True)
            done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
            assert done["status"] == "COMPLETED", done
            assert job.wait(timeout_s=120) == 0
            [attempt, *_] = job.events("starting attempt")
            assert ("minute_counts" + READER_SUFFIX in attempt["workers"]) is not direct, attempt["workers"]
            assert attempt["workers"]["minute_counts"] == 2
            savepoint = done["metadata_path"]
        (letter,) = [d for d in dead_letters(kafka_bootstrap, dead_letter_topic, {origin}, timeout_s=60)
                     if (d.origin_topic, d.origin_partition, d.origin_offset) == origin]
        verdict = verify_two_stage(kafka_bootstrap, topics, sent, timeout_s=120)
    assert letter.error_type == "not-co-partitioned" and "not in the partition of its key group" in letter.error_message
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def produce_at(bootstrap: str, topic: str, partition: int, value: bytes) -> list[int]:
    """Write ``value`` into ``partition``; the offset it got."""
    offsets: list[int] = []
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}))
    producer.produce(topic, value=value, partition=partition, on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert producer.flush(30) == 0 and len(offsets) == 1
    return offsets
