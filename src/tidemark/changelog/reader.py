"""Reading exactly the changes that changelog ranges stand for.

A range ``[start, end)`` of one partition is written by one writer (a task attempt), but a
partition may also hold, inside that range, records of other writers: tasks whose key groups
share the partition, and a failed attempt still writing (a zombie). The record at ``start`` is
always the range writer's own (the writer learned ``start`` from its delivery report), so the
reader takes the range's owner - job, task and epoch - from that record and applies, inside the
range, only the owner's records, and of those only the key groups of the range's ``clip`` (the
key groups of the task whose snapshot listed the range) that the restoring backend owns.

Contract of :meth:`ChangelogReader.read`: yields each such record once (even when several
ranges cover it), in offset order per partition, reading with an assign()-mode consumer that
seeks to each range's start and stops at its end; anything outside the ranges is never
yielded. A range whose start record is gone, an end that cannot be reached within the idle
timeout, or an undecodable record inside a range raise :class:`ChangelogReadError`.

State-metadata records (``STATE_META_KEY``) of a range's owner are not changes: each goes to
``on_state_meta`` (a state's definition as ``state_meta`` gives it). ``resume`` lets a caller
that already applied a prefix of the ranges (the materializer's replica) read on from there:
records below ``resume[(topic, partition)]`` are only used to identify range owners, never
yielded, and the reader seeks past them once every range starting below has its owner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition as KafkaTopicPartition

from tidemark.changelog.errors import ChangelogReadError
from tidemark.changelog.options import ChangelogReaderOptions
from tidemark.changelog.partitioning import STATE_META_KEY, key_group_of_record_key, key_groups_of
from tidemark.protocol.codec import Codec, default_codec
from tidemark.protocol.errors import DecodeError
from tidemark.kafka.clients import consumer_config
from tidemark.protocol.messages import StateChange
from tidemark.keygroups import KeyGroupRange
from tidemark.state.backend import KeyedSnapshot
from tidemark.state.table import KeyedStateChange
from tidemark.types import TopicPartition

_POLL_S = 0.2
Owner = tuple[str, str, int]  # job id, task id, epoch of a range's writer
# a state's definition, and the key groups of the range(s) it was logged in (clipped to the target)
StateMetaCallback = Callable[[dict[str, Any], tuple[KeyGroupRange, ...]], None]


@dataclass(slots=True)
class ReadStats:
    records: int = 0  # records consumed inside the ranges
    applied: int = 0  # records yielded
    foreign: int = 0  # inside a range but written by another writer (other task, zombie)
    outside_key_groups: int = 0  # the owner's records of key groups not restored here
    metas: int = 0  # the owners' state-metadata records
    resumed: int = 0  # the owners' changes below ``resume``: already applied, not yielded
    lowest_offsets: dict[TopicPartition, int] = field(default_factory=dict)  # first record read


@dataclass(slots=True)
class _Range:
    start: int
    end: int
    clip: KeyGroupRange
    owner: Owner | None = None


@dataclass(slots=True)
class _Cursor:
    """Reading state of one partition: its ranges, merged into intervals read in order."""

    tp: KafkaTopicPartition
    ranges: list[_Range]
    intervals: list[tuple[int, int]]
    key: TopicPartition  # tp's partition as a key, built once (not per record)
    index: int = 0
    position: int = 0
    last_progress: float = field(default_factory=time.monotonic)
    next_start: int = 0  # ranges[next_start:] are not activated yet
    active: list[_Range] = field(default_factory=list)
    resume: int = 0  # records below are not yielded (already applied by the caller)

    @property
    def done(self) -> bool:
        return self.index >= len(self.intervals)

    @property
    def end(self) -> int:
        return self.intervals[self.index][1]


def _intervals(ranges: list[_Range]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for r in ranges:
        if merged and r.start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], r.end)
        else:
            merged.append([r.start, r.end])
    return [(s, e) for s, e in merged]


class ChangelogReader:
    """Reads changelog ranges of one operator's topic; one ``read`` at a time."""

    def __init__(
        self,
        client: dict[str, Any],
        *,
        partitions: int,
        max_parallelism: int,
        options: ChangelogReaderOptions = ChangelogReaderOptions(),
        codec: Codec | None = None,
    ) -> None:
        self._client = client
        self.partitions = partitions
        self.max_parallelism = max_parallelism
        self.options = options
        self._codec = codec or default_codec()
        self.last_stats = ReadStats()

    def _cursors(self, sources: Sequence[KeyedSnapshot], target: KeyGroupRange,
                 resume: Mapping[TopicPartition, int]) -> list[_Cursor]:
        by_partition: dict[TopicPartition, list[_Range]] = {}
        for source in sources:
            clip = source.key_groups.intersection(target)
            for r in source.ranges:
                held = key_groups_of(r.partition, self.partitions, self.max_parallelism)
                if r.end_offset > r.start_offset and len(clip.intersection(held)):
                    by_partition.setdefault(TopicPartition(r.topic, r.partition), []).append(
                        _Range(r.start_offset, r.end_offset, clip.intersection(held)))
        cursors = []
        for (topic, partition), ranges in sorted(by_partition.items()):
            ranges.sort(key=lambda r: r.start)
            intervals = _intervals(ranges)
            key = TopicPartition(topic, partition)
            cursors.append(_Cursor(KafkaTopicPartition(topic, partition, intervals[0][0]), ranges, intervals, key,
                                   position=intervals[0][0], resume=resume.get(key, 0)))
        return cursors

    def read(self, sources: Sequence[KeyedSnapshot], target: KeyGroupRange, *,
             resume: Mapping[TopicPartition, int] | None = None,
             on_state_meta: StateMetaCallback | None = None) -> Iterator[KeyedStateChange]:
        """The changes of ``sources`` that a backend owning ``target`` must apply (see module)."""
        self.last_stats = stats = ReadStats()
        cursors = {c.key: c for c in self._cursors(sources, target, resume or {})}
        if cursors:
            yield from self._read_cursors(cursors, stats, on_state_meta)

    def _read_cursors(self, cursors: dict[TopicPartition, _Cursor], stats: ReadStats,
                      on_state_meta: StateMetaCallback | None) -> Iterator[KeyedStateChange]:
        """Consume the cursors' intervals, each record through ``_accept`` (the transport part:
        an in-memory reader for tests overrides only this)."""
        consumer = Consumer(self._consumer_config())
        try:
            consumer.assign([c.tp for c in cursors.values()])
            open_cursors = len(cursors)
            while open_cursors:
                for message in consumer.consume(self.options.batch_records, _POLL_S):
                    self._check_error(message)
                    # per record: the plain tuple, equal to its TopicPartition (see types.TopicPartition)
                    cursor = cursors.get((message.topic(), message.partition()))  # type: ignore[call-overload]
                    if cursor is None or cursor.done:
                        continue
                    change = self._accept(cursor, message, stats, on_state_meta)
                    if change is not None:
                        yield change
                open_cursors = self._advance(consumer, cursors.values())
        finally:
            consumer.close()

    def _consumer_config(self) -> dict[str, Any]:
        # assign() mode; the changelog is never transactional, and a range start that is gone
        # (truncated) must fail loudly instead of silently resetting
        return consumer_config(dict(self._client), None, **{
            "auto.offset.reset": "error", "isolation.level": "read_uncommitted",
            **dict(self.options.consumer_overrides)})

    @staticmethod
    def _check_error(message: Message) -> None:
        error = message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise ChangelogReadError(f"{message.topic()}/{message.partition()}: {error}")

    def _accept(self, cursor: _Cursor, message: Message, stats: ReadStats,
                on_state_meta: StateMetaCallback | None) -> KeyedStateChange | None:
        if message.error() is not None:
            return None
        offset = message.offset()
        start, end = cursor.intervals[cursor.index]
        if not start <= offset < end or offset < cursor.position:
            return None  # prefetched before a seek, or beyond the interval
        cursor.position = offset + 1
        cursor.last_progress = time.monotonic()
        stats.records += 1
        stats.lowest_offsets.setdefault(cursor.key, offset)
        ranges = cursor.ranges
        starts_here = cursor.next_start < len(ranges) and ranges[cursor.next_start].start <= offset
        is_meta = message.key() == STATE_META_KEY
        key_group = key_group_of_record_key(message.key())
        if not starts_here and not is_meta and not any(key_group in r.clip for r in cursor.active):
            stats.outside_key_groups += 1
            return None
        record = self._decode(cursor, message)
        owner = (record.job_id, record.task_id, record.epoch)
        if starts_here:
            self._activate(cursor, offset, owner)
        cursor.active = [r for r in cursor.active if r.end > offset]
        mine = [r for r in cursor.active if r.owner == owner]
        if not mine:
            stats.foreign += 1
            return None
        if is_meta:
            stats.metas += 1
            if on_state_meta is not None:
                on_state_meta(self._state_meta(cursor, offset, record), tuple(r.clip for r in mine))
            return None
        if not any(record.key_group in r.clip for r in mine):
            stats.outside_key_groups += 1
            return None
        if offset < cursor.resume:
            stats.resumed += 1
            return None
        stats.applied += 1
        return KeyedStateChange.from_message(record)

    @staticmethod
    def _state_meta(cursor: _Cursor, offset: int, record: StateChange) -> dict[str, Any]:
        try:
            meta = json.loads(record.value or b"")
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("name") != record.state_name:
            raise ChangelogReadError(f"{cursor.tp.topic}/{cursor.tp.partition}@{offset}: "
                                     "malformed state-metadata record inside a changelog range")
        return meta

    def _decode(self, cursor: _Cursor, message: Message) -> StateChange:
        try:
            return self._codec.decode_as(message.value(), StateChange)
        except DecodeError as exc:
            raise ChangelogReadError(
                f"{cursor.tp.topic}/{cursor.tp.partition}@{message.offset()}: "
                f"undecodable record inside a changelog range: {exc}"
            ) from None

    @staticmethod
    def _activate(cursor: _Cursor, offset: int, owner: Owner) -> None:
        ranges = cursor.ranges
        while cursor.next_start < len(ranges) and ranges[cursor.next_start].start <= offset:
            r = ranges[cursor.next_start]
            if r.start < offset:
                raise ChangelogReadError(
                    f"{cursor.tp.topic}/{cursor.tp.partition}: the first record of range "
                    f"[{r.start}, {r.end}) is gone (next readable offset {offset}); "
                    "its writer cannot be identified"
                )
            r.owner = owner
            cursor.active.append(r)
            cursor.next_start += 1

    def _advance(self, consumer: Consumer, cursors: Any) -> int:
        """Move finished cursors to their next interval or unassign them; count open ones."""
        open_cursors = 0
        for cursor in cursors:
            if cursor.done:
                continue
            if cursor.position < cursor.resume:
                self._skip_resumed(consumer, cursor)
                if cursor.done:
                    consumer.incremental_unassign([cursor.tp])
                    continue
            if cursor.position < cursor.end:
                self._check_progress(consumer, cursor)
            if cursor.position >= cursor.end:
                cursor.index += 1
                if cursor.done:
                    consumer.incremental_unassign([cursor.tp])
                    continue
                cursor.position = cursor.intervals[cursor.index][0]
                cursor.last_progress = time.monotonic()
                consumer.seek(KafkaTopicPartition(cursor.tp.topic, cursor.tp.partition, cursor.position))
            open_cursors += 1
        return open_cursors

    @staticmethod
    def _skip_resumed(consumer: Consumer, cursor: _Cursor) -> None:
        """Seek past records below ``resume`` once every range starting there has its owner."""
        pending = cursor.ranges[cursor.next_start].start if cursor.next_start < len(cursor.ranges) else None
        target = cursor.resume if pending is None else min(cursor.resume, pending)
        if target <= cursor.position:
            return
        while not cursor.done and cursor.intervals[cursor.index][1] <= target:
            cursor.index += 1  # every range in it started below target: owners are known
        if cursor.done:
            return
        cursor.position = max(target, cursor.intervals[cursor.index][0])
        cursor.last_progress = time.monotonic()
        consumer.seek(KafkaTopicPartition(cursor.tp.topic, cursor.tp.partition, cursor.position))

    def _check_progress(self, consumer: Consumer, cursor: _Cursor) -> None:
        if time.monotonic() - cursor.last_progress <= self.options.idle_timeout_s:
            return
        reported = consumer.position([KafkaTopicPartition(cursor.tp.topic, cursor.tp.partition)])[0].offset
        if reported >= cursor.end:  # offsets without records (e.g. transaction markers)
            cursor.position = reported
            return
        raise ChangelogReadError(
            f"{cursor.tp.topic}/{cursor.tp.partition}: position {cursor.position} did not reach "
            f"the range end {cursor.end} within {self.options.idle_timeout_s}s"
        )
