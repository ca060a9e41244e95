"""Watermarks of one stage worker: from its source partitions, or from its channels.

Pure: observations in, watermarks out; the caller supplies the clock (monotonic milliseconds for
idleness). One rule combines *inputs* at both levels (Flink's ``StatusWatermarkValve``): the
watermark is the minimum over the inputs that are not idle; when every input is idle it is the
largest of theirs, and the combination is idle. A combined watermark never goes back.

* :class:`SourceWatermarks` (a stage reading the job's input): an input is a partition; its
  watermark is its largest event time so far minus the out-of-orderness bound minus one
  (:class:`~tidemark.runtime.api.EventTime`), and it is idle after ``idle_timeout_ms`` without a
  record *while nothing is left to read in it*: a partition with unread records (a worker still
  starting, or behind) is never idle, or its records would arrive behind a watermark that went
  on without them. While that is not known (a broker outage, a stale lag report) no partition
  turns idle, and the silence counts anew once it is known again: a partition silent through an
  outage has not been seen to be idle, and its producers' backlog is still to come. A partition
  that has had no record yet holds the watermark at :data:`~tidemark.runtime.api.NO_WATERMARK`
  until it turns idle.
* :class:`ChannelWatermarks` (a stage reading a channel): an input is a channel (topic, partition,
  upstream task); its watermark and idleness are what the upstream task last wrote into it
  (:func:`tidemark.runtime.records.watermark_headers`). It remembers each channel's watermark
  when the channel's barrier passed, so a checkpoint stores exactly the watermarks at its cut.

Both are snapshotted as one JSON item (:meth:`snapshot_item`) in the stage's operator state and
restored from the items of every old worker (:meth:`restore`), so a restore neither moves time
back nor fires a timer twice: the *floor* (the combined watermark at the checkpoint) bounds the
watermark from below until the inputs pass it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.runtime.api import NO_WATERMARK, EventTime
from tidemark.types import CheckpointId, TaskId


@dataclass(frozen=True, slots=True)
class WatermarkStatus:
    """A watermark and whether it comes from idle inputs only."""

    watermark: int = NO_WATERMARK
    idle: bool = False


def combine(inputs: Iterable[WatermarkStatus]) -> WatermarkStatus:
    """The minimum over active inputs; the maximum over all when every one is idle (or none)."""
    active = NO_WATERMARK
    found_active = False
    largest = NO_WATERMARK
    for status in inputs:
        largest = max(largest, status.watermark)
        if not status.idle:
            active = status.watermark if not found_active else min(active, status.watermark)
            found_active = True
    return WatermarkStatus(active, False) if found_active else WatermarkStatus(largest, True)


class _Combined:
    """The monotone combination of a worker's inputs, with its floor."""

    def __init__(self) -> None:
        self.floor = NO_WATERMARK
        self.current = WatermarkStatus()

    def _advance(self, combined: WatermarkStatus) -> WatermarkStatus:
        self.current = WatermarkStatus(max(self.floor, self.current.watermark, combined.watermark), combined.idle)
        return self.current

    @property
    def watermark(self) -> int:
        return self.current.watermark


class SourceWatermarks(_Combined):
    """Per-partition event time of a source stage's worker (see the module docstring)."""

    def __init__(self, strategy: EventTime, partitions: Iterable[tuple[str, int]]) -> None:
        super().__init__()
        self.strategy = strategy
        self._lag = strategy.max_out_of_orderness_ms + 1
        self._largest: dict[tuple[str, int], int] = {p: NO_WATERMARK for p in partitions}
        self._last_seen: dict[tuple[str, int], float] = {}

    def observe(self, partition: tuple[str, int], event_time_ms: int, now_ms: float) -> None:
        """A record of ``partition`` with this event time was read."""
        if event_time_ms > self._largest.get(partition, NO_WATERMARK):
            self._largest[partition] = event_time_ms
        self._last_seen[partition] = now_ms

    def update(self, now_ms: float, unread: Collection[tuple[str, int]] | None = None) -> WatermarkStatus:
        """The worker's watermark now: idleness by ``now_ms`` (counted from the first update: the
        query's first batch or tick), for partitions not in ``unread`` (those known to hold
        records not read yet; None: not known, so none is idle)."""
        timeout = self.strategy.idle_timeout_ms
        if unread is None:  # silence counts only while what is left to read is known: after a
            self._last_seen.update(dict.fromkeys(self._largest, now_ms))  # broker outage, anew
        statuses = []
        for partition, largest in self._largest.items():
            watermark = largest - self._lag if largest != NO_WATERMARK else NO_WATERMARK
            seen = self._last_seen.setdefault(partition, now_ms)  # idleness counts from the first update
            idle = (timeout is not None and unread is not None and partition not in unread
                    and now_ms - seen >= timeout)
            statuses.append(WatermarkStatus(watermark, idle))
        return self._advance(combine(statuses))

    def snapshot_item(self, worker: int) -> bytes:
        return json.dumps({"worker": worker, "floor": self.current.watermark,
                           "partitions": [[t, p, v] for (t, p), v in sorted(self._largest.items())
                                          if v != NO_WATERMARK]}).encode()

    def restore(self, items: Iterable[bytes]) -> None:
        """The largest event time of each of this worker's partitions, and the floor: the
        smallest of the old workers' watermarks (each old worker's covers only its partitions)."""
        floors = []
        for doc in _docs(items):
            floors.append(int(doc["floor"]))
            for topic, partition, largest in doc.get("partitions", ()):
                if (topic, partition) in self._largest:
                    self._largest[(topic, partition)] = max(self._largest[(topic, partition)], int(largest))
        if floors:
            self.floor = min(floors)
            self.current = WatermarkStatus(self.floor)


Channel = tuple[str, int, TaskId]


class ChannelWatermarks(_Combined):
    """What the upstream tasks wrote into each channel (see the module docstring)."""

    def __init__(self, channels: Iterable[Channel]) -> None:
        super().__init__()
        self._channels: dict[Channel, WatermarkStatus] = {c: WatermarkStatus() for c in channels}
        self._at_barrier: dict[CheckpointId, dict[Channel, int]] = {}

    def update(self, channel: Channel, status: WatermarkStatus) -> WatermarkStatus | None:
        """A watermark record of ``channel``; the new combined watermark if it moved (or its
        idleness changed), else None."""
        if channel not in self._channels:
            return None  # a channel this worker does not read (another worker's share)
        previous = self._channels[channel]
        self._channels[channel] = WatermarkStatus(max(previous.watermark, status.watermark), status.idle)
        before = self.current
        after = self._advance(combine(self._channels.values()))
        return after if after != before else None

    def barrier(self, channel: Channel, checkpoint_id: CheckpointId) -> None:
        """``channel`` delivered the barrier of ``checkpoint_id``: its watermark at the cut."""
        if channel in self._channels:
            self._at_barrier.setdefault(checkpoint_id, {}).setdefault(channel, self._channels[channel].watermark)

    def snapshot_item(self, worker: int, checkpoint_id: CheckpointId) -> bytes:
        """The channels' watermarks at ``checkpoint_id``'s barriers (the current ones of channels
        whose barrier was not seen); marks of this and older checkpoints are dropped."""
        marks = self._at_barrier.get(checkpoint_id, {})
        for old in [c for c in self._at_barrier if c <= checkpoint_id]:
            del self._at_barrier[old]
        values = {c: marks.get(c, s.watermark) for c, s in self._channels.items()}
        floor = combine(WatermarkStatus(v, self._channels[c].idle) for c, v in values.items()).watermark
        return json.dumps({"worker": worker, "floor": max(self.floor, floor),
                           "channels": [[t, p, task, v] for (t, p, task), v in sorted(values.items())
                                        if v != NO_WATERMARK]}).encode()

    def restore(self, items: Iterable[bytes]) -> None:
        floors = []
        for doc in _docs(items):
            floors.append(int(doc["floor"]))
            for topic, partition, task, value in doc.get("channels", ()):
                channel = (topic, partition, TaskId(task))
                if channel in self._channels:
                    self._channels[channel] = WatermarkStatus(int(value))
        if floors:
            self.floor = min(floors)
            self.current = WatermarkStatus(self.floor)


def _docs(items: Iterable[bytes]) -> list[Mapping[str, Any]]:
    """The distinct items (union state: every task sees every old worker's item once per task)."""
    seen: dict[Hashable, Mapping[str, Any]] = {}
    for item in items:
        doc = json.loads(item)
        seen[json.dumps(doc, sort_keys=True)] = doc
    return list(seen.values())
