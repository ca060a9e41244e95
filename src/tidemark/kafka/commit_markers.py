"""Commit markers: proof, inside Kafka, that one sink transaction committed.

A marker is a record on the marker topic, written *in the same transaction* as the data of one
(query, batch, input partition). A read_committed reader sees it exactly when that data is
committed. Key ``"{query_id}/{partition}"`` (so all markers of one writer slot go to one marker
partition, appended in batch order); value: JSON :class:`CommitMarker`.

Lookup reads the marker partition backwards in windows from its high watermark, with a
read_committed consumer that must reach the high watermark (so transactions still open when the
lookup starts are resolved first), and stops at the newest marker of the slot whose batch is not
after the one asked for.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.metadata import metadata_consumer, topic_partitions
from tidemark.kafka.range_reader import read_messages
from tidemark.kafka.topics import TopicSpec


@dataclass(frozen=True, slots=True)
class CommitMarker:
    query_id: str
    batch_id: int
    partition: int
    transactional_id: str
    records: int
    written_at: int

    @property
    def key(self) -> bytes:
        return marker_key(self.query_id, self.partition)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CommitMarker:
        return cls(**json.loads(raw))


def marker_key(query_id: str, partition: int) -> bytes:
    return f"{query_id}/{partition}".encode()


def marker_partition(key: bytes, partitions: int) -> int:
    """Deterministic marker partition of a slot (crc32, independent of the client's partitioner)."""
    return zlib.crc32(key) % partitions


def ensure_marker_topic(client: Mapping[str, Any], topic: str, partitions: int = 1) -> None:
    """Create the marker topic when missing (idempotent)."""
    ensure_topics(AdminClient(dict(client)), [TopicSpec(topic, partitions, {"retention.ms": "-1"})])


def marker_partition_count(client: Mapping[str, Any], topic: str, timeout_s: float = 10.0) -> int:
    """Partitions of the marker topic; waits up to ``timeout_s`` for a topic just created (Apache
    Kafka's metadata shows a new topic a moment after CreateTopics returns)."""
    consumer = metadata_consumer(client)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            partitions = topic_partitions(consumer, topic, timeout_s)
            if partitions:
                return len(partitions)
            if time.monotonic() > deadline:
                raise LookupError(f"commit marker topic {topic!r} not found")
            time.sleep(0.2)
    finally:
        consumer.close()


def find_commit(
    client: Mapping[str, Any],
    topic: str,
    query_id: str,
    batch_id: int,
    partition: int,
    *,
    window: int = 1_000,
    idle_timeout_s: float = 90.0,
    partitions: int | None = None,
) -> CommitMarker | None:
    """The committed marker of (query, batch, partition), or None when that batch is not committed.

    Call it after ``init_transactions`` of the slot's transactional id, so no earlier attempt of
    the same slot can still commit. ``partitions``: the marker topic's partition count, when
    the caller knows it (else it is looked up).
    """
    found = newest_commit(client, topic, query_id, partition, at_most=batch_id, window=window,
                          idle_timeout_s=idle_timeout_s, partitions=partitions)
    return found if found is not None and found.batch_id == batch_id else None


def newest_commit(
    client: Mapping[str, Any],
    topic: str,
    query_id: str,
    partition: int,
    *,
    at_most: int,
    window: int = 1_000,
    idle_timeout_s: float = 90.0,
    partitions: int | None = None,
) -> CommitMarker | None:
    """The newest committed marker of slot (query, partition) whose batch is ``<= at_most``."""
    key = marker_key(query_id, partition)
    part = marker_partition(key, partitions or marker_partition_count(client, topic))
    consumer = metadata_consumer(client, "read_uncommitted")
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, part), timeout=10.0, cached=False)
    finally:
        consumer.close()
    end = high
    while end > low:
        begin = max(low, end - window)
        found = _newest_in(client, topic, part, begin, end, key, at_most, idle_timeout_s)
        if found is not None:
            return found
        end = begin
    return None


def _newest_in(
    client: Mapping[str, Any], topic: str, partition: int, begin: int, end: int, key: bytes, batch_id: int,
    idle_timeout_s: float,
) -> CommitMarker | None:
    """The newest marker of ``key`` with a batch ``<= batch_id`` among offsets ``[begin, end)``."""
    newest: CommitMarker | None = None
    for messages in read_messages(client, topic, partition, begin, end, isolation_level="read_committed",
                                  idle_timeout_s=idle_timeout_s):
        for message in messages:
            value = message.value()
            if message.key() != key or value is None:
                continue
            marker = CommitMarker.decode(value)
            if marker.batch_id <= batch_id:
                newest = marker
    return newest


__all__ = ["CommitMarker", "ensure_marker_topic", "find_commit", "marker_key", "marker_partition", "newest_commit"]
