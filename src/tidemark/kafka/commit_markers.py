"""Commit markers: proof, inside Kafka, that one sink transaction committed.

A marker is a record on the marker topic, written *in the same transaction* as the data of one
slot: (query, batch, input partition) for the Spark sink, (``job/operator``, checkpoint, subtask
index) for the two-phase-commit output (``job/operator/side`` for a side output's), which writes one marker per task whose results the
transaction commits. A read_committed reader sees it exactly when that data is committed. Key
``"{query_id}/{partition}"`` (so all markers of one writer slot go to one marker partition,
appended in batch order); value: JSON :class:`CommitMarker`.

Lookup reads the marker partition backwards in windows from its high watermark, with a
read_committed consumer that must reach the high watermark (so transactions still open when the
lookup starts are resolved first), and stops at the newest marker of the slot whose batch is not
after the one asked for. :func:`newest_commits` answers for many slots of one query in one such
backward pass per marker partition (:class:`MarkerScan` is its pure fold).
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.metadata import metadata_consumer, topic_partitions, watermark_offsets
from tidemark.kafka.outage import broker_wait
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
    task: str | None = None
    """The task whose results the marker covers (two-phase-commit output; ``partition`` is its
    subtask index). None for the Spark sink's slots, and for the two-phase-commit markers written
    before markers were per task: one per commit, in slot 0, covering every task of the commit."""

    @property
    def key(self) -> bytes:
        return marker_key(self.query_id, self.partition)

    @property
    def covers_every_task(self) -> bool:
        """A slot-0 marker without a task: a whole commit of the two-phase-commit output as it was
        written before markers were per task."""
        return self.partition == 0 and self.task is None

    def encode(self) -> bytes:
        fields = asdict(self)
        if self.task is None:  # byte for byte what a marker without a task always was
            del fields["task"]
        return json.dumps(fields, sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CommitMarker:
        return cls(**json.loads(raw))


def commit_query_id(job_id: str, operator_id: str, side: str = "") -> str:
    """The query id of a two-phase-commit output's markers: a stage's output (``job/operator``)
    or one of its side outputs (``job/operator/side``)."""
    return f"{job_id}/{operator_id}/{side}" if side else f"{job_id}/{operator_id}"


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


@dataclass(frozen=True, slots=True)
class SlotCommits:
    """What :func:`newest_commits` found for slots of one query, each marker the newest committed
    one of its slot whose batch is ``<= at_most``.

    ``newest`` holds the slots asked for that have such a marker, and any other slot of the query
    met on the way; ``whole_commit`` is the newest slot-0 marker that covers every task
    (:attr:`CommitMarker.covers_every_task`), looked up only when an asked slot has no marker.
    """

    newest: Mapping[int, CommitMarker]
    whole_commit: CommitMarker | None = None

    def committed_up_to(self, slot: int) -> int:
        """The batch up to which an asked slot is committed (0: none): its own newest marker; a
        slot with none counts as committed as far as the whole-commit marker says, so commits
        written before markers were per task still count for every task."""
        own = self.newest.get(slot)
        if own is not None:
            return own.batch_id
        return self.whole_commit.batch_id if self.whole_commit is not None else 0

    @property
    def newest_batch(self) -> int:
        """The newest batch committed in any slot found (0: none)."""
        markers = [*self.newest.values(), *([self.whole_commit] if self.whole_commit else [])]
        return max((marker.batch_id for marker in markers), default=0)


@dataclass
class MarkerScan:
    """The pure fold of one marker partition's lookup: fed windows of (key, value) records in
    offset order, newest window first; a slot's answer is its last marker with a batch
    ``<= at_most`` in the newest window that holds one. ``done`` once every wanted slot has its
    answer and, when ``need_whole_commit``, the whole-commit marker was found too."""

    query_id: str
    wanted: frozenset[int]
    at_most: int
    need_whole_commit: bool = False
    newest: dict[int, CommitMarker] = field(default_factory=dict)
    whole_commit: CommitMarker | None = None

    @property
    def done(self) -> bool:
        return self.wanted <= self.newest.keys() and (not self.need_whole_commit or self.whole_commit is not None)

    def fold(self, window: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        prefix = f"{self.query_id}/".encode()
        found: dict[int, CommitMarker] = {}
        whole: CommitMarker | None = None
        for key, value in window:
            if key is None or value is None or not key.startswith(prefix) or not key[len(prefix):].isdigit():
                continue
            marker = CommitMarker.decode(value)
            if marker.batch_id > self.at_most:
                continue
            found[int(key[len(prefix):])] = marker
            if marker.covers_every_task:
                whole = marker
        for slot, marker in found.items():
            self.newest.setdefault(slot, marker)
        if self.whole_commit is None:
            self.whole_commit = whole


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
    found = newest_commits(client, topic, query_id, [partition], at_most=at_most, window=window,
                           idle_timeout_s=idle_timeout_s, partitions=partitions, whole_commit_fallback=False)
    return found.newest.get(partition)


def newest_commits(
    client: Mapping[str, Any],
    topic: str,
    query_id: str,
    slots: Iterable[int],
    *,
    at_most: int,
    window: int = 1_000,
    idle_timeout_s: float = 90.0,
    partitions: int | None = None,
    whole_commit_fallback: bool = True,
) -> SlotCommits:
    """The newest committed marker of each slot of ``query_id`` in ``slots`` whose batch is
    ``<= at_most``, in one backward pass over each marker partition that holds one of them.

    With ``whole_commit_fallback``, when a slot has no marker, slot 0's partition (read last) is
    also searched for the newest whole-commit marker (see :class:`SlotCommits`).
    """
    count = partitions or marker_partition_count(client, topic)
    by_partition: dict[int, set[int]] = {}
    for slot in slots:
        by_partition.setdefault(marker_partition(marker_key(query_id, slot), count), set()).add(slot)
    whole_partition = marker_partition(marker_key(query_id, 0), count)
    newest: dict[int, CommitMarker] = {}
    whole_commit: CommitMarker | None = None
    for part in sorted({*by_partition, whole_partition}, key=lambda p: p == whole_partition):
        scan = MarkerScan(query_id, frozenset(by_partition.get(part, ())), at_most)
        if part == whole_partition and whole_commit_fallback:
            # the slots of this partition are found by this same pass, or it reads to the start
            scan.need_whole_commit = any(slot not in newest for other, wanted in by_partition.items()
                                         if other != part for slot in wanted)
        if not scan.done:
            _scan_backwards(client, topic, part, scan, window, idle_timeout_s)
        newest.update(scan.newest)
        if part == whole_partition and whole_commit_fallback:
            whole_commit = scan.whole_commit
    return SlotCommits(newest, whole_commit)


def _scan_backwards(client: Mapping[str, Any], topic: str, partition: int, scan: MarkerScan, window: int,
                    idle_timeout_s: float) -> None:
    """Feed ``scan`` windows of ``partition`` from its high watermark (taken now) back to its
    start, until it is done; each window is read read_committed up to its end."""
    consumer = metadata_consumer(client, "read_uncommitted")
    try:  # a partition just created may have no leader yet (NOT_LEADER_FOR_PARTITION): waited through
        low, high = broker_wait(dict(client)).call(
            f"watermarks of {topic}/{partition}",
            lambda: watermark_offsets(consumer, topic, partition, timeout_s=10.0))
    finally:
        consumer.close()
    end = high
    while end > low and not scan.done:
        begin = max(low, end - window)
        scan.fold((message.key(), message.value())
                  for messages in read_messages(client, topic, partition, begin, end,
                                                isolation_level="read_committed", idle_timeout_s=idle_timeout_s)
                  for message in messages)
        end = begin


__all__ = ["CommitMarker", "MarkerScan", "SlotCommits", "ensure_marker_topic", "find_commit", "marker_key",
           "marker_partition", "newest_commit", "newest_commits"]
