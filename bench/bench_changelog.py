"""Changelog append throughput (state changes/s) and where the time goes, printed as a table.

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.

    .venv/bin/python bench/bench_changelog.py --changes 100000 --partitions 4

Rows (each a ``ValueState.update`` of an int under one of ``--keys`` int keys, or its parts):
- ``heap update, no changelog``: the keyed backend alone;
- ``heap update + serialize``: the same with a no-op change listener (the heap serializes each
  mutation into a ``KeyedStateChange`` only while someone listens);
- ``StateChange Avro encode``: ``to_message`` + ``codec.encode`` of ready changes;
- ``produce pre-encoded``: idempotent producer, ready values, until every record is acked;
- ``changelog heap`` / ``changelog rocksdb``: ``ChangelogStateBackend`` end to end, updates
  then ``snapshot`` (persist: every change durable, exact ranges);
- ``restore from changelog``: read + decode + apply the ranges into a fresh heap backend.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.changelog import ChangelogReader, ChangelogWriter, changelog_topic
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.codec import default_codec
from tidemark.state import (
    HashMapStateBackend,
    KeyedStateBackend,
    KeyedStateChange,
    KeyGroupRange,
    RocksDBStateBackend,
    ValueStateDescriptor,
)
from tidemark.changelog.backend import ChangelogStateBackend, restore_from_changelog
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId, JobId, TaskId

MAX_P = 128
ALL = KeyGroupRange(0, MAX_P - 1)
Row = tuple[str, int, float]


def updates(backend: Any, changes: int, keys: int) -> None:
    state = backend.get_state(ValueStateDescriptor("count"))
    for i in range(changes):
        backend.set_current_key(i % keys)
        state.update(i)


def timed(label: str, count: int, action: Callable[[], Any]) -> Row:
    began = time.perf_counter()
    action()
    return label, count, time.perf_counter() - began


def collected_changes(changes: int, keys: int) -> list[KeyedStateChange]:
    backend = HashMapStateBackend(ALL, MAX_P)
    out: list[KeyedStateChange] = []
    backend.add_change_listener(out.append)
    updates(backend, changes, keys)
    return out


def run(bootstrap: str, changes: int, keys: int, partitions: int, work: str) -> list[Row]:
    client = {"bootstrap.servers": bootstrap}
    names = TopicNames(f"bench-{uuid.uuid4().hex[:8]}")
    specs = [changelog_topic(names, "bench", f"op{i}", partitions) for i in range(3)]
    ensure_topics(AdminClient(client), specs)
    rows = [timed("heap update, no changelog", changes,
                  lambda: updates(HashMapStateBackend(ALL, MAX_P), changes, keys))]
    listened = HashMapStateBackend(ALL, MAX_P)
    listened.add_change_listener(lambda change: None)
    rows.append(timed("heap update + serialize", changes, lambda: updates(listened, changes, keys)))
    ready = collected_changes(changes, keys)
    codec, job, task = default_codec(), JobId("bench"), TaskId("op#0")
    encoded: list[bytes] = []
    rows.append(timed("StateChange Avro encode", changes,
                      lambda: encoded.extend(codec.encode(c.to_message(job, task)) for c in ready)))
    rows.append(timed("produce pre-encoded", changes,
                      lambda: produce(client, specs[0].name, encoded, partitions)))
    backends: list[tuple[str, Callable[[], KeyedStateBackend]]] = [
        ("changelog heap", lambda: HashMapStateBackend(ALL, MAX_P)),
        ("changelog rocksdb", lambda: RocksDBStateBackend(os.path.join(work, "rocks"), ALL, MAX_P)),
    ]
    snapshot = None
    storage = FilesystemCheckpointStorage(os.path.join(work, "checkpoints"))
    for (label, factory), spec in zip(backends, specs[1:]):
        writer = ChangelogWriter(client, spec.name, partitions=partitions, max_parallelism=MAX_P,
                                 job_id=job, task_id=task)
        with ChangelogStateBackend(factory(), writer) as backend:
            def end_to_end(backend: ChangelogStateBackend = backend) -> None:
                nonlocal snapshot
                updates(backend, changes, keys)
                snapshot = backend.snapshot(CheckpointId(1), storage)
            rows.append(timed(label, changes, end_to_end))
    assert snapshot is not None
    reader = ChangelogReader(client, partitions=partitions, max_parallelism=MAX_P)
    with HashMapStateBackend(ALL, MAX_P) as fresh:
        rows.append(timed("restore from changelog", changes,
                          lambda: restore_from_changelog(fresh, [snapshot], storage, reader)))
        if reader.last_stats.applied != changes:
            raise SystemExit(f"restore applied {reader.last_stats.applied}, expected {changes}")
    return rows


def produce(client: dict[str, Any], topic: str, values: list[bytes], partitions: int) -> None:
    producer = Producer(producer_config(client, **{"batch.size": 1 << 20,
                                                   "queue.buffering.max.messages": 500_000}))
    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, None, i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise SystemExit("produce: records left undelivered")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-changelog-") as work:
        with kafka_or_embedded(os.path.join(work, "broker")) as (bootstrap, broker):
            rows = run(bootstrap, args.changes, args.keys, args.partitions, work)
    print(f"\n{args.changes} ValueState updates over {args.keys} int keys, {args.partitions} "
          f"changelog partitions, broker {'external' if broker is None else 'embedded ' + broker.describe()}")
    print(f"{'path':<28}{'changes':>10}{'seconds':>10}{'changes/s':>12}{'us/change':>11}")
    for label, count, seconds in rows:
        print(f"{label:<28}{count:>10}{seconds:>10.2f}{count / seconds:>12,.0f}"
              f"{seconds / count * 1e6:>11.1f}")


if __name__ == "__main__":
    main()
