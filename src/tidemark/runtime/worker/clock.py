"""Time at one stage worker: its watermark, the timers it fires, its late records and their metrics.

The worker (:mod:`tidemark.runtime.worker`) tells a :class:`StageClock` what happens and hands
on what it returns:

* ``event_time(record, value)`` for each record, then ``observe`` (a source stage's partitions)
  and ``late`` (is it behind the watermark? then the stage's late-record policy has it);
* ``end_of_batch(unread)`` / ``tick(unread)`` for a source stage: the watermark moves (a partition
  may have turned idle), which fires event-time timers; ``tick`` also fires the due
  processing-time timers of any stage;
* ``channel_watermark(record)`` for a watermark record of a channel, in channel order, and
  ``barrier(record)`` for each barrier, so a snapshot holds the watermarks at the cut;
* ``to_emit()`` / ``emitted(status)``: the watermark to write downstream after the batch's
  records, when it is news;
* ``snapshot_item(checkpoint_id)`` into the checkpoint, ``restore(items)`` from one.

What timers emit goes into their task's output (:attr:`StageTask.output`), after what the
records before the watermark emitted. A job without event time has no watermark: only processing-time timers fire. See
``docs/concepts/time.md``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from tidemark.clock import now_ms
from tidemark.api import NO_WATERMARK, EventTime, Stage
from tidemark.runtime.worker.late_records import LateRecordHandler
from tidemark.runtime.job.metrics import (
    TIMERS_FIRED,
    TIMERS_PENDING,
    TIMERS_REGISTERED,
    WATERMARK,
    WATERMARK_LAG,
    init_time_metrics,
)
from tidemark.runtime.job.records import InputRecord
from tidemark.operators.time import StageTime
from tidemark.runtime.worker.task import StageTask
from tidemark.runtime.worker.watermarks import ChannelWatermarks, SourceWatermarks, Unread, WatermarkStatus
from tidemark.state.timers import TimeDomain
from tidemark.types import Channel, CheckpointId, TopicPartition


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class StageClock:
    """See the module docstring. ``event_time``: the job's (``JobSpec.event_time_of(stage)``);
    ``reads``: a source stage's partitions, ``channels``: a channel stage's."""

    def __init__(self, job: str, stage: Stage, worker: int, event_time: EventTime | None, tasks: Sequence[StageTask],
                 time: StageTime, client: dict[str, Any], *, reads: Sequence[TopicPartition] = (),
                 channels: Iterable[Channel] | None = None) -> None:
        self.job, self.stage, self.worker = job, stage.name, worker
        self.event_time = event_time
        self.tasks = tasks
        self.time = time
        self.source: SourceWatermarks | None = None
        self.channels: ChannelWatermarks | None = None
        self.late_records: LateRecordHandler | None = None
        self._extractors: dict[str, Any] = {}  # a source stage's input topic -> its event-time extractor
        if event_time is not None and channels is None:
            for item in stage.input_list:
                strategy = stage.event_time_of(item) or event_time
                if strategy.timestamp is not None:
                    self._extractors[item.topic] = strategy.timestamp
        self._emitted: WatermarkStatus | None = None
        init_time_metrics(job, stage.name)
        if event_time is None:
            return
        if channels is None:
            self.source = SourceWatermarks({i.topic: stage.event_time_of(i) or event_time for i in stage.input_list},
                                           reads)
        else:
            self.channels = ChannelWatermarks(channels)
        if stage.forwards_to is None:  # an exchange reader forwards late records: its stage judges them
            self.late_records = LateRecordHandler(client, job, stage)

    @property
    def has_watermark(self) -> bool:
        return self.source is not None or self.channels is not None

    def extracts_from_value(self, topic: str) -> bool:
        """True when the event time of a record of ``topic`` needs its decoded value."""
        return topic in self._extractors

    # ------------------------------------------------------------------ records

    def event_time_of(self, record: InputRecord, value: Any) -> int:
        """A record's event time: its input's extractor's (a source stage's), a channel record's
        own, else the Kafka timestamp."""
        extract = self._extractors.get(record.topic) if self._extractors else None
        if extract is not None:
            return int(extract(value))
        return record.event_time_ms if record.event_time_ms is not None else record.timestamp_ms

    def observe(self, record: InputRecord, event_time_ms: int) -> None:
        """A source stage read ``record`` (its partition is active, and its time counts)."""
        if self.source is not None:
            self.source.observe((record.topic, record.partition), event_time_ms,  # type: ignore[arg-type]
                                _monotonic_ms())  # per record: the plain tuple (see types.TopicPartition)

    def late(self, record: InputRecord, event_time_ms: int) -> bool:
        """True when ``record`` is behind the watermark and must not be processed (the policy
        has it: dropped, or written to the late-data topic)."""
        watermark = self.time.watermark
        if event_time_ms > watermark or self.late_records is None:
            return False
        return not self.late_records.handle(record, event_time_ms, watermark)

    def too_late(self, record: InputRecord, event_time_ms: int) -> None:
        """The operator found ``record`` too late (its windows closed): the policy has it."""
        if self.late_records is not None:
            self.late_records.handle(record, event_time_ms, self.time.watermark)

    # ------------------------------------------------------------------ moving time

    def end_of_batch(self, unread: Unread | None) -> None:
        """A source stage's micro-batch was processed: its watermark moves. ``unread``: the
        consumer lag's (:meth:`~tidemark.runtime.worker.consumer_lag.ConsumerLag.unread`), on the same
        monotonic clock."""
        if self.source is not None:
            self._advance(self.source.update(_monotonic_ms(), unread))

    def tick(self, unread: Unread | None) -> None:
        """Between micro-batches: idle partitions release the watermark, due processing-time timers fire."""
        self.end_of_batch(unread)
        self._fire(TimeDomain.PROCESSING_TIME, self.time.clock())

    def channel_watermark(self, record: InputRecord) -> None:
        """A watermark record of a channel (in channel order: after the records before it)."""
        if self.channels is None or record.watermark is None or record.task is None:
            return  # an upstream with event time and this stage built without: nothing to do
        moved = self.channels.update(record.channel, record.watermark)
        if moved is not None:
            self._advance(moved)

    def barrier(self, record: InputRecord) -> None:
        """A barrier of this attempt on a channel: the channel's watermark at the cut."""
        if self.channels is not None and record.barrier is not None and record.task is not None:
            self.channels.barrier(record.channel, record.barrier.checkpoint_id)

    def _advance(self, status: WatermarkStatus) -> None:
        if status.watermark <= self.time.watermark:
            return
        self.time.watermark = status.watermark
        WATERMARK.labels(self.job, self.stage).set(status.watermark / 1000)
        self.report_lag()
        self._fire(TimeDomain.EVENT_TIME, status.watermark)

    def _fire(self, domain: TimeDomain, until: int) -> None:
        for task in self.tasks:
            if task.due(domain, until):
                task.fire(domain, until)

    # ------------------------------------------------------------------ downstream, checkpoints, metrics

    def to_emit(self) -> WatermarkStatus | None:
        """The worker's watermark when it is news downstream (it moved, or turned idle or active)."""
        watermarks = self.source or self.channels
        if watermarks is None or watermarks.watermark == NO_WATERMARK:
            return None
        status = watermarks.current
        return None if status == self._emitted else status

    def emitted(self, status: WatermarkStatus) -> None:
        self._emitted = status

    def snapshot_item(self, checkpoint_id: CheckpointId) -> bytes | None:
        if self.source is not None:
            return self.source.snapshot_item(self.worker)
        if self.channels is not None:
            return self.channels.snapshot_item(self.worker, checkpoint_id)
        return None

    def restore(self, items: Sequence[bytes]) -> None:
        watermarks = self.source or self.channels
        if watermarks is not None:
            watermarks.restore(items)
            self.time.watermark = watermarks.watermark

    def count_timers(self) -> None:
        """Timers registered and fired since the last call, and those pending, into the metrics."""
        registered, fired = self.time.registered, self.time.fired
        if not registered and not fired:
            return
        for domain in TimeDomain:
            if registered[domain]:
                TIMERS_REGISTERED.labels(self.job, self.stage, domain.value).inc(registered[domain])
            if fired[domain]:
                TIMERS_FIRED.labels(self.job, self.stage, domain.value).inc(fired[domain])
            TIMERS_PENDING.labels(self.job, self.stage, domain.value).set(
                sum(task.pending_timers(domain) for task in self.tasks))
        registered.clear()
        fired.clear()

    def report_lag(self) -> None:
        if self.time.watermark != NO_WATERMARK:
            WATERMARK_LAG.labels(self.job, self.stage).set(max(0.0, (now_ms() - self.time.watermark) / 1000))

    def close(self) -> None:
        if self.late_records is not None:
            self.late_records.close()
