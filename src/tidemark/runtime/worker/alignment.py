"""Barrier alignment at a stage that reads a channel (Flink: CheckpointBarrierHandler).

Pure: records in, actions out; the caller supplies the clock.

A *channel* is one (topic, partition, upstream task): records of one upstream task in one
partition, in offset order. Each upstream task writes barrier ``n`` into every partition right
after its data for checkpoint ``n``. Lifecycle: construct with the attempt's epoch, the channels
to expect and the restored cut (records at or before it are already in the restored state) ->
``feed(record)`` for every record in offset order per partition -> act on the returned actions in
order: :class:`Process` a record, or take the :class:`Aligned` checkpoint.

* **Exactly-once (aligned):** once a channel delivered barrier ``n`` its later records are held
  until every channel delivered it; then ``Aligned(n)`` is returned and the held records are
  released (in order, before the record being fed). The state snapshot at ``Aligned(n)`` contains
  exactly the records before barrier ``n`` on every channel.
* **At-least-once (unaligned):** nothing is held; ``Aligned(n)`` is returned when the last
  channel delivers barrier ``n``. Records of channels that delivered it earlier were processed
  already (``overtaken``), so a restore from ``n`` processes them again: duplicates are bounded by
  what arrived after the barriers.

Records written by any other attempt than ``epoch`` are dropped: after a restore, everything the
failed attempts wrote past the restored cut is written again by the new attempt.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tidemark.protocol.messages import Barrier
from tidemark.runtime.job.records import InputRecord
from tidemark.types import Channel, CheckpointId, CheckpointingMode, Epoch, TopicPartition


@dataclass(frozen=True, slots=True)
class Process:
    record: InputRecord


@dataclass(frozen=True, slots=True)
class Aligned:
    """Checkpoint ``barrier.checkpoint_id`` is aligned: snapshot now, with ``cut``."""

    barrier: Barrier
    cut: dict[Channel, int]  # offset of each channel's barrier
    alignment_ms: int
    held: int  # records held back while aligning (exactly-once)
    overtaken: int  # records processed past an early barrier (at-least-once)

    def resume_offsets(self) -> dict[TopicPartition, int]:
        """Where each partition's reading resumes after a restore from this cut."""
        positions: dict[TopicPartition, int] = {}
        for (topic, partition, _), offset in self.cut.items():
            key = TopicPartition(topic, partition)
            positions[key] = min(positions.get(key, offset + 1), offset + 1)
        return positions


@dataclass(frozen=True, slots=True)
class Cancelled:
    """Alignment of ``checkpoint_id`` gave way to a newer barrier (the old one cannot complete)."""

    checkpoint_id: CheckpointId


Action = Process | Aligned | Cancelled


@dataclass
class _Pending:
    barrier: Barrier
    started_ms: int
    cut: dict[Channel, int] = field(default_factory=dict)
    overtaken: int = 0


class AlignmentError(ValueError):
    """A record cannot be placed on a channel (missing channel headers)."""


class BarrierAligner:
    def __init__(self, mode: CheckpointingMode, epoch: Epoch, channels: set[Channel],
                 restored_cut: dict[Channel, int] | None = None) -> None:
        if not channels:
            raise ValueError("a channel reader needs at least one channel")
        self.mode = mode
        self.epoch = epoch
        self.channels = frozenset(channels)
        self._skip = dict(restored_cut or {})
        self._pending: dict[CheckpointId, _Pending] = {}
        self._barred: set[Channel] = set()  # the channels in any pending alignment's cut (per record: one lookup)
        self._held: deque[InputRecord] = deque()
        self._last_aligned = CheckpointId(0)
        self.dropped_stale = 0

    @property
    def aligning(self) -> CheckpointId | None:
        """The checkpoint being aligned (exactly-once), if any."""
        return min(self._pending) if self._pending else None

    @property
    def held(self) -> int:
        return len(self._held)

    def feed(self, record: InputRecord, now_ms: int) -> list[Action]:
        actions: list[Action] = []
        self._feed(record, now_ms, actions)
        return actions

    def _feed(self, record: InputRecord, now_ms: int, out: list[Action]) -> None:
        if record.epoch is None or record.task is None:
            raise AlignmentError(
                f"{record.topic}/{record.partition}@{record.offset} has no channel headers; "
                "a stage reading a channel cannot also read plain topics")
        # per record: the plain tuple, equal to its Channel (see types.TopicPartition)
        channel: Channel = (record.topic, record.partition, record.task)  # type: ignore[assignment]
        if record.epoch != self.epoch or record.offset <= self._skip.get(channel, -1):
            self.dropped_stale += 1
            return
        if record.barrier is not None:
            self._on_barrier(record.barrier, channel, record.offset, now_ms, out)
        elif channel not in self._barred:
            out.append(Process(record))
        elif self.mode is CheckpointingMode.EXACTLY_ONCE:
            self._held.append(record)
        else:
            for pending in self._pending.values():
                if channel in pending.cut:
                    pending.overtaken += 1
            out.append(Process(record))

    def _forget(self, checkpoint_id: CheckpointId) -> None:
        del self._pending[checkpoint_id]
        self._barred = {channel for pending in self._pending.values() for channel in pending.cut}

    def _on_barrier(self, barrier: Barrier, channel: Channel, offset: int, now_ms: int,
                    out: list[Action]) -> None:
        cid = barrier.checkpoint_id
        if cid <= self._last_aligned:
            return
        if self.mode is CheckpointingMode.EXACTLY_ONCE:
            for older in [c for c in self._pending if c < cid]:  # a newer barrier overtook it
                self._forget(older)
                out.append(Cancelled(older))
                self._release(now_ms, out)
            if any(c > cid for c in self._pending):
                return  # a late barrier of a cancelled alignment
        pending = self._pending.setdefault(cid, _Pending(barrier, now_ms))
        pending.cut.setdefault(channel, offset)
        self._barred.add(channel)
        if len(pending.cut) != len(self.channels) or set(pending.cut) != self.channels:
            return
        self._forget(cid)
        for older in [c for c in self._pending if c < cid]:
            self._forget(older)
            out.append(Cancelled(older))
        self._last_aligned = cid
        exactly_once = self.mode is CheckpointingMode.EXACTLY_ONCE
        out.append(Aligned(pending.barrier, dict(pending.cut),
                           alignment_ms=max(0, now_ms - pending.started_ms) if exactly_once else 0,
                           held=len(self._held), overtaken=pending.overtaken))
        self._release(now_ms, out)

    def _release(self, now_ms: int, out: list[Action]) -> None:
        held, self._held = self._held, deque()
        for record in held:
            self._feed(record, now_ms, out)
