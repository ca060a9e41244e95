"""Watermarks of one stage worker: from its source partitions, or from its channels.

Pure: observations in, watermarks out; the caller supplies the clock (monotonic milliseconds for
idleness). One rule combines *inputs* at both levels (Flink's ``StatusWatermarkValve``): the
watermark is the minimum over the inputs that are not idle; when every input is idle it is the
largest of theirs, and the combination is idle. A combined watermark never goes back.

* :class:`SourceWatermarks` (a stage reading the job's input): an input is a partition; its
  watermark is its largest event time so far minus the out-of-orderness bound minus one
  (:class:`~tidemark.api.EventTime`). It is idle only on the broker's word
  (:class:`Unread`): when the end offsets, asked at a moment the partition had had no record for
  ``idle_timeout_ms``, showed nothing left to read in it, and the broker had answered without a
  break all through that silence. A partition with unread records (a worker still starting,
  behind, or whose fetches of it return nothing) is never idle, or its records would arrive
  behind a watermark that went on without them; nor is one whose silence was not watched (a
  broker stalled or away, an answer that came late or not at all): its producers' backlog is
  still to come. A partition that has had no record yet holds the watermark at
  :data:`~tidemark.api.NO_WATERMARK` until it turns idle.
* :class:`ChannelWatermarks` (a stage reading a channel): an input is a channel (topic, partition,
  upstream task); its watermark and idleness are what the upstream task last wrote into it
  (:func:`tidemark.runtime.job.records.watermark_headers`). An upstream task writes each of its
  watermarks into every partition, so a channel idle at less than the newest watermark its task
  wrote into another partition is one read less far: the task's records after that idle mark are
  still to come on it, and it counts as active. It remembers each channel's watermark when the
  channel's barrier passed, so a checkpoint stores exactly the watermarks at its cut.

Both are snapshotted as one JSON item (:meth:`snapshot_item`) in the stage's operator state and
restored from the items of every old worker (:meth:`restore`), so a restore neither moves time
back nor fires a timer twice: the *floor* (the combined watermark at the checkpoint) bounds the
watermark from below until the inputs pass it.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.api import NO_WATERMARK, EventTime
from tidemark.types import Channel, CheckpointId, TaskId, TopicPartition


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


@dataclass(frozen=True, slots=True)
class Unread:
    """What the broker's end offsets say is left to read in a source worker's partitions
    (:class:`~tidemark.runtime.worker.consumer_lag.ConsumerLag`), in monotonic milliseconds.

    ``partitions`` held records not read yet when the end offsets were asked, at ``asked_ms``
    (records written later are not counted); the broker has answered without a break since
    ``answering_since_ms``."""

    partitions: frozenset[TopicPartition]
    asked_ms: float
    answering_since_ms: float = float("-inf")


class SourceWatermarks(_Combined):
    """Per-partition event time of a source stage's worker (see the module docstring)."""

    def __init__(self, strategy: EventTime | Mapping[str, EventTime], partitions: Iterable[TopicPartition]) -> None:
        """``strategy``: the stage's, or each input topic's (a stage whose inputs tell event time
        each their own way)."""
        super().__init__()
        self._largest: dict[TopicPartition, int] = {p: NO_WATERMARK for p in partitions}
        strategies = strategy if isinstance(strategy, Mapping) else {topic: strategy for topic, _ in self._largest}
        self._lag = {topic: s.max_out_of_orderness_ms + 1 for topic, s in strategies.items()}
        self._timeout = {topic: s.idle_timeout_ms for topic, s in strategies.items()}
        self._last_seen: dict[TopicPartition, float] = {}
        self._watched_from: float | None = None  # the first update, or the last one without ``unread``

    def observe(self, partition: TopicPartition, event_time_ms: int, now_ms: float) -> None:
        """A record of ``partition`` with this event time was read."""
        if event_time_ms > self._largest.get(partition, NO_WATERMARK):
            self._largest[partition] = event_time_ms
        self._last_seen[partition] = now_ms

    def update(self, now_ms: float, unread: Unread | None = None) -> WatermarkStatus:
        """The worker's watermark now. ``unread``: the broker's last word on what is left to read
        (None: not known, so no partition is idle). A partition's silence counts from its last
        record, and from no earlier than the first update, the last update without ``unread``
        and the start of the broker's unbroken answers."""
        if unread is None or self._watched_from is None:
            self._watched_from = now_ms
        watched_from = self._watched_from if unread is None else max(self._watched_from, unread.answering_since_ms)
        statuses = []
        for partition, largest in self._largest.items():
            topic = partition[0]
            watermark = largest - self._lag[topic] if largest != NO_WATERMARK else NO_WATERMARK
            timeout = self._timeout[topic]
            silent_since = max(self._last_seen.get(partition, watched_from), watched_from)
            idle = (timeout is not None and unread is not None and partition not in unread.partitions
                    and unread.asked_ms - silent_since >= timeout)
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
                    key = TopicPartition(topic, partition)
                    self._largest[key] = max(self._largest[key], int(largest))
        if floors:
            self.floor = min(floors)
            self.current = WatermarkStatus(self.floor)




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
        after = self._advance(combine(_as_combined(self._channels)))
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
        at_cut = {c: WatermarkStatus(v, self._channels[c].idle) for c, v in values.items()}
        floor = combine(_as_combined(at_cut)).watermark
        return json.dumps({"worker": worker, "floor": max(self.floor, floor),
                           "channels": [[t, p, task, v] for (t, p, task), v in sorted(values.items())
                                        if v != NO_WATERMARK]}).encode()

    def restore(self, items: Iterable[bytes]) -> None:
        floors = []
        for doc in _docs(items):
            floors.append(int(doc["floor"]))
            for topic, partition, task, value in doc.get("channels", ()):
                channel = Channel(topic, partition, TaskId(task))
                if channel in self._channels:
                    self._channels[channel] = WatermarkStatus(int(value))
        if floors:
            self.floor = min(floors)
            self.current = WatermarkStatus(self.floor)


def _as_combined(channels: Mapping[Channel, WatermarkStatus]) -> list[WatermarkStatus]:
    """The channels' statuses as they combine: a channel idle at less than the newest watermark
    its upstream task wrote into any channel read here is active (see the module docstring)."""
    newest: dict[TaskId, int] = {}
    for (_, _, task), status in channels.items():
        newest[task] = max(newest.get(task, NO_WATERMARK), status.watermark)
    return [WatermarkStatus(status.watermark) if status.idle and status.watermark < newest[task] else status
            for (_, _, task), status in channels.items()]


def _docs(items: Iterable[bytes]) -> list[Mapping[str, Any]]:
    """The distinct items (union state: every task sees every old worker's item once per task)."""
    seen: dict[Hashable, Mapping[str, Any]] = {}
    for item in items:
        doc = json.loads(item)
        seen[json.dumps(doc, sort_keys=True)] = doc
    return list(seen.values())
