"""At-least-once mode: no alignment, and duplicates only of what came after the last checkpoint.
(Stop-with-savepoint and restore at other parallelisms and worker counts: ``test_scale_out.py``;
killed services: the fault campaign in ``test_chaos.py``, which also checks retention afterwards.)"""

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
)
from tidemark.local.pipeline import wait_for
from tidemark.examples.generator import expected_top_urls
from tidemark.examples.verify import read_committed
from tidemark.kafka.metadata import records_in
from tidemark.local.pipeline import InputFeeder, acked_checkpoints, stage_logs

pytestmark = pytest.mark.timeout(900)


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
        # a checkpoint to restore when the kill comes (the hold below lets none complete)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 1, 300, "a first checkpoint")
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
