"""The changelog writer (Flink's ``StateChangelogWriter``): the abstract writer and its Kafka form.

:class:`StateChangelogWriter` keeps the marks, ranges and checkpoint outcomes; a subclass sends
the records and reports their offsets (:class:`ChangelogWriter` on a Kafka topic; an in-memory one
for tests lives in :mod:`tidemark.testing.changelog`). Lifecycle, and which call must follow which:

1. construct (checks that the topic exists with the expected partition count);
2. ``append(change)`` any number of times, at any point until ``close``; before the first
   change of a state, ``append_state_meta`` logs the state's definition (a task does this when
   it registers the state), so a reader of the ranges learns serializers and kinds;
3. ``next_sequence_number()`` takes a :class:`ChangelogMark` (typically at a checkpoint
   barrier); ``persist(up_to, checkpoint_id)`` then flushes and returns the exact
   ``[start, end)`` Kafka offset ranges, per partition, of every change appended after the
   truncation point (initially: the writer's first change) and before ``up_to``;
4. every persisted checkpoint is then either ``confirm``-ed (it completed: its changes are part
   of a durable checkpoint) or ``reset`` (it was aborted: nothing is lost, the next ``persist``
   still covers those changes). Both are idempotent; confirming one checkpoint subsumes every
   older pending one;
5. ``truncate(before)`` after a materialization covered everything before ``before``; ``before``
   must not be later than the latest confirmed mark (only confirmed changes are materialized).
   Truncation is logical: later ranges start at ``before``; deleting records is the changelog
   service's job (other writers may share a partition);
6. ``close()`` flushes; afterwards only ``close`` may be called again.

Offsets are learned from delivery reports, never from the partition's high watermark. One writer
instance per task attempt; not thread-safe.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from tidemark.changelog.errors import ChangelogWriteError
from tidemark.changelog.options import ChangelogWriterOptions
from tidemark.changelog.partitioning import (
    STATE_META_KEY,
    check_partitions,
    key_groups_of,
    partitions_of,
    record_key,
)
from tidemark.kafka.clients import producer_config
from tidemark.kafka.metadata import partition_counts
from tidemark.kafka.outage import PATIENCE_S, broker_wait
from tidemark.protocol.codec import Codec, default_codec
from tidemark.protocol.messages import ChangelogRange, StateChange, StateChangeOp
from tidemark.keygroups import KeyGroupRange
from tidemark.state.table import KeyedStateChange
from tidemark.types import CheckpointId, Epoch, JobId, KeyGroup, SequenceNumber, TaskId


@dataclass(frozen=True, slots=True)
class ChangelogMark:
    """A point in one writer's stream of changes.

    ``sequence`` counts the changes appended before the mark (Flink's ``SequenceNumber``);
    ``counts`` says how many of them went to each partition. Only meaningful to the writer that
    made it.
    """

    sequence: int
    counts: tuple[tuple[int, int], ...]

    def count(self, partition: int) -> int:
        for p, n in self.counts:
            if p == partition:
                return n
        return 0


ORIGIN = ChangelogMark(0, ())
"""The mark before a writer's first change."""


class _PartitionLog:
    """What one writer knows about its records in one partition (record index = order)."""

    __slots__ = ("appended", "delivered", "last_offset", "offsets", "wanted")

    def __init__(self) -> None:
        self.appended = 0
        self.delivered = 0
        self.last_offset = -1
        self.offsets: dict[int, int] = {}  # record index -> offset, only for indexes marks need
        self.wanted: set[int] = {0}

    def want(self, index: int) -> None:
        if index < self.delivered:
            if index == self.delivered - 1:
                self.offsets[index] = self.last_offset
            elif index not in self.offsets:
                raise AssertionError(f"offset of delivered record {index} was not kept")
        else:
            self.wanted.add(index)

    def forget_before(self, index: int) -> None:
        self.offsets = {i: o for i, o in self.offsets.items() if i >= index}
        self.wanted = {i for i in self.wanted if i >= index}


class StateChangelogWriter(ABC):
    """Appends one task attempt's state changes to its operator's changelog (see the module
    docstring for the lifecycle). A subclass sends records (``_send``), reports each delivered
    one in order per partition (``_delivered``), waits for deliveries (``_await_delivery``) and
    releases its transport (``_close_transport``)."""

    def __init__(self, topic: str, *, partitions: int, max_parallelism: int, job_id: JobId,
                 task_id: TaskId, epoch: Epoch = Epoch(0), codec: Codec | None = None) -> None:
        check_partitions(partitions, max_parallelism)
        self.topic = topic
        self.partitions = partitions
        self.max_parallelism = max_parallelism
        self.job_id, self.task_id, self.epoch = job_id, task_id, epoch
        self._codec = codec or default_codec()
        self._logs: dict[int, _PartitionLog] = {}
        self._sequence = 0
        self._base = ORIGIN
        self._pending: dict[CheckpointId, ChangelogMark] = {}
        self._confirmed: tuple[CheckpointId, ChangelogMark] | None = None
        self._failure: str | None = None
        self._closed = False
        self.appended_bytes = 0

    # ------------------------------------------------------------------ transport (subclass)

    @abstractmethod
    def _send(self, partition: int, key: bytes, value: bytes) -> None:
        """Send one record; its delivery is reported later through ``_delivered``."""

    @abstractmethod
    def _await_delivery(self, up_to: ChangelogMark) -> None:
        """Return once every record before ``up_to`` is delivered, or raise
        :class:`ChangelogWriteError`."""

    @abstractmethod
    def flush(self, timeout_s: float | None = None) -> int:
        """Wait until every record appended so far is delivered; returns how many are still in
        flight after ``timeout_s``. Marks nothing durable for a checkpoint (that is ``persist``)."""

    @abstractmethod
    def _close_transport(self) -> None:
        """Flush what was appended (best effort) and release the transport."""

    # ------------------------------------------------------------------ appending

    def append(self, change: KeyedStateChange) -> None:
        """Send ``change`` to the partition of its key group (asynchronously)."""
        self._check_usable()
        partition = change.key_group * self.partitions // self.max_parallelism
        message = change.to_message(self.job_id, self.task_id, epoch=self.epoch,
                                    timestamp=time.time_ns() // 1_000_000)
        self._append_record(partition, record_key(change.key_group), self._codec.encode(message))

    def append_state_meta(self, meta: Mapping[str, Any], key_groups: KeyGroupRange) -> None:
        """Log a state's definition (``tidemark.state.snapshot.state_meta``: name, kind,
        serializers, TTL) into every partition holding ``key_groups``, so that a reader of any
        of this writer's ranges there learns it. Counted like a change (marks and ranges
        include it); JSON, keyed ``STATE_META_KEY``, never applied as state."""
        self._check_usable()
        body = json.dumps(dict(meta), sort_keys=True).encode()
        now = time.time_ns() // 1_000_000
        for partition in partitions_of(key_groups, self.partitions, self.max_parallelism):
            first = max(key_groups.start, key_groups_of(partition, self.partitions, self.max_parallelism).start)
            message = StateChange(self.job_id, self.task_id, KeyGroup(first), str(meta["name"]),
                                  StateChangeOp.PUT, b"", value=body, timestamp=now, epoch=self.epoch)
            self._append_record(partition, STATE_META_KEY, self._codec.encode(message))

    def _append_record(self, partition: int, key: bytes, value: bytes) -> None:
        log = self._logs.get(partition)
        if log is None:
            log = self._logs[partition] = _PartitionLog()
        self._send(partition, key, value)
        log.appended += 1
        self._sequence += 1
        self.appended_bytes += len(value)

    def _delivered(self, partition: int, offset: int | None) -> None:
        """The next record of ``partition`` is durable at ``offset``."""
        log = self._logs[partition]
        if offset is None or offset <= log.last_offset:
            self._failure = self._failure or (
                f"{self.topic}/{partition}: delivery report out of order "
                f"({offset} after {log.last_offset})"
            )
            return
        index = log.delivered
        log.delivered = index + 1
        log.last_offset = offset
        if index in log.wanted:
            log.offsets[index] = offset

    # ------------------------------------------------------------------ marks and persist

    def next_sequence_number(self) -> ChangelogMark:
        """The mark after every change appended so far (Flink's ``nextSequenceNumber``)."""
        self._check_usable()
        for log in self._logs.values():
            if log.appended:
                log.want(log.appended - 1)  # this mark's end in the partition
            log.want(log.appended)  # the start of a range truncated at this mark
        counts = tuple(sorted((p, log.appended) for p, log in self._logs.items() if log.appended))
        return ChangelogMark(self._sequence, counts)

    def persist(self, up_to: ChangelogMark, checkpoint_id: CheckpointId) -> tuple[ChangelogRange, ...]:
        """Flush, then the ranges of every change from the truncation point to ``up_to``.

        Raises :class:`ChangelogWriteError` if a change before ``up_to`` is not durable within
        ``options.persist_timeout_s``; ``ValueError`` if ``up_to`` precedes the truncation point.
        """
        self._check_usable()
        if up_to.sequence < self._base.sequence:
            raise ValueError(f"mark {up_to.sequence} precedes the truncation point {self._base.sequence}")
        self._await_delivery(up_to)
        self._pending[checkpoint_id] = up_to
        return self.ranges(self._base, up_to)

    def _all_delivered(self, up_to: ChangelogMark) -> bool:
        return all(self._logs[p].delivered >= n for p, n in up_to.counts)

    def ranges(self, start: ChangelogMark, end: ChangelogMark) -> tuple[ChangelogRange, ...]:
        """The offset ranges of the changes between two marks (all already delivered)."""
        result = []
        for partition, count in end.counts:
            first = start.count(partition)
            if count <= first:
                continue
            log = self._logs[partition]
            result.append(ChangelogRange(self.topic, partition, SequenceNumber(log.offsets[first]),
                                         SequenceNumber(log.offsets[count - 1] + 1)))
        return tuple(result)

    # ------------------------------------------------------------------ outcomes

    def confirm(self, checkpoint_id: CheckpointId) -> bool:
        """The checkpoint completed; True unless it was unknown or already settled."""
        up_to = self._pending.pop(checkpoint_id, None)
        if up_to is None:
            return False
        for older in [c for c in self._pending if c < checkpoint_id]:
            del self._pending[older]
        if self._confirmed is None or self._confirmed[1].sequence <= up_to.sequence:
            self._confirmed = (checkpoint_id, up_to)
        return True

    def reset(self, checkpoint_id: CheckpointId) -> bool:
        """The checkpoint was aborted; True unless it was unknown or already settled."""
        return self._pending.pop(checkpoint_id, None) is not None

    def truncate(self, before: ChangelogMark) -> None:
        """Changes before ``before`` are materialized: later ranges start at ``before``."""
        self._check_usable()
        confirmed = self._confirmed[1].sequence if self._confirmed else 0
        if before.sequence > confirmed:
            raise ValueError(f"cannot truncate at {before.sequence}: only changes up to the "
                             f"confirmed mark {confirmed} may be materialized")
        if before.sequence <= self._base.sequence:
            return
        self._base = before
        for partition, log in self._logs.items():
            log.forget_before(before.count(partition))

    @property
    def truncation_point(self) -> ChangelogMark:
        return self._base

    @property
    def confirmed(self) -> tuple[CheckpointId, ChangelogMark] | None:
        """The newest confirmed checkpoint and its mark."""
        return self._confirmed

    @property
    def appended_count(self) -> int:
        return self._sequence

    # ------------------------------------------------------------------ lifecycle

    def _check_usable(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        if self._failure is not None:
            raise ChangelogWriteError(self._failure)

    def close(self) -> None:
        """Flush what was appended (best effort) and release the transport; idempotent."""
        if not self._closed:
            self._closed = True
            self._close_transport()

    def __enter__(self) -> StateChangelogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ChangelogWriter(StateChangelogWriter):
    """The writer on a Kafka topic: an idempotent producer, offsets from delivery reports."""

    def __init__(
        self,
        client: dict[str, Any],
        topic: str,
        *,
        partitions: int,
        max_parallelism: int,
        job_id: JobId,
        task_id: TaskId,
        epoch: Epoch = Epoch(0),
        options: ChangelogWriterOptions = ChangelogWriterOptions(),
        codec: Codec | None = None,
    ) -> None:
        super().__init__(topic, partitions=partitions, max_parallelism=max_parallelism,
                         job_id=job_id, task_id=task_id, epoch=epoch, codec=codec)
        self.options = options
        self._producer = Producer(self._config(client, options))
        self._wait = broker_wait(client)
        self._check_topic(client)
        self._since_poll = 0

    @staticmethod
    def _config(client: dict[str, Any], options: ChangelogWriterOptions) -> dict[str, Any]:
        config = producer_config(
            client,
            **{"linger.ms": options.linger_ms, "batch.size": options.batch_size_bytes,
               "queue.buffering.max.messages": options.queue_max_messages},
        )
        config.update(dict(options.producer_overrides))
        config.update({"enable.idempotence": True, "acks": "all"})
        return config

    def _check_topic(self, client: dict[str, Any]) -> None:
        found = partition_counts(client, [self.topic], self.options.persist_timeout_s)
        if self.topic not in found:
            raise ChangelogWriteError(f"changelog topic {self.topic!r} does not exist")
        if found[self.topic] != self.partitions:
            raise ChangelogWriteError(
                f"changelog topic {self.topic!r} has {found[self.topic]} partitions, expected {self.partitions}"
            )

    def _send(self, partition: int, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(self.topic, value, key, partition, self._on_delivery)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.05)
                self._check_usable()
        self._since_poll += 1
        if self._since_poll >= self.options.poll_every:
            self._since_poll = 0
            self._producer.poll(0)

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._failure = self._failure or f"delivery to {self.topic} failed: {error}"
            return
        self._delivered(message.partition(), message.offset())

    def _await_delivery(self, up_to: ChangelogMark) -> None:
        """Wait until every change before ``up_to`` is delivered. The timeout counts only time in
        which the broker is known to answer: during an outage (see :mod:`tidemark.kafka.outage`)
        the producer keeps retrying and this waits, up to the outage patience."""
        deadline = time.monotonic() + self.options.persist_timeout_s
        patience = time.monotonic() + PATIENCE_S
        while True:
            self._check_usable()
            if self._all_delivered(up_to):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0 and self._wait.waiting and time.monotonic() < patience:
                self._wait.failed(f"persist changes to {self.topic}", "changes not delivered yet")
                deadline = time.monotonic() + self.options.persist_timeout_s
                continue
            if remaining <= 0:
                raise ChangelogWriteError(f"changes to {self.topic} not durable within "
                                          f"{self.options.persist_timeout_s}s")
            self._producer.flush(min(remaining, 1.0))

    def flush(self, timeout_s: float | None = None) -> int:
        self._check_usable()
        return self._producer.flush(self.options.persist_timeout_s if timeout_s is None else timeout_s)

    def _close_transport(self) -> None:
        self._producer.flush(self.options.persist_timeout_s)
