"""Time at one stage worker: its watermark, the timers it fires, its late records and their metrics.

The worker (:mod:`tidemark.runtime.worker`) tells a :class:`StageClock` what happens and hands
on what it returns:

* ``event_time(record, value)`` for each record, then ``observe`` (a source stage's partitions)
  and ``late`` (is it behind the watermark? then the stage's late-record policy has it);
* ``end_of_batch(batch)`` / ``tick(batch)`` for a source stage: the watermark moves (a partition
  may have turned idle), which fires event-time timers; ``tick`` also fires the due
  processing-time timers of any stage;
* ``channel_watermark(record, batch)`` for a watermark record of a channel, in channel order, and
  ``barrier(record)`` for each barrier, so a snapshot holds the watermarks at the cut;
* ``to_emit()`` / ``emitted(status)``: the watermark to write downstream after the batch's
  records, when it is news;
* ``snapshot_item(checkpoint_id)`` into the checkpoint, ``restore(items)`` from one.

What timers emit goes into ``batch`` (results by task), with what ``process`` emitted, to the same
output. A job without event time has no watermark: only processing-time timers fire. See
``docs/concepts/time.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tidemark.clock import now_ms
from tidemark.runtime.api import NO_WATERMARK, EventTime, Stage
from tidemark.runtime.late_records import LateRecordHandler
from tidemark.runtime.metrics import (
    TIMERS_FIRED,
    TIMERS_PENDING,
    TIMERS_REGISTERED,
    WATERMARK,
    WATERMARK_LAG,
    init_time_metrics,
)
from tidemark.runtime.outputs import OutputRecord
from tidemark.runtime.records import InputRecord
from tidemark.runtime.task import StageTask, StageTime
from tidemark.runtime.watermarks import ChannelWatermarks, SourceWatermarks, Unread, WatermarkStatus
from tidemark.state.timers import TimeDomain, Timer
from tidemark.types import Channel, CheckpointId, TaskId, TopicPartition

TimerFailed = Callable[[Timer, Exception], None]


def _monotonic_ms() -> float:
    return time.monotonic() * 1000


class StageClock:
    """See the module docstring. ``event_time``: the job's (``JobSpec.event_time_of(stage)``);
    ``reads``: a source stage's partitions, ``channels``: a channel stage's."""

    def __init__(self, job: str, stage: Stage, worker: int, event_time: EventTime | None, tasks: Sequence[StageTask],
                 time: StageTime, client: dict[str, Any], *, reads: Sequence[TopicPartition] = (),
                 channels: Iterable[Channel] | None = None, timer_failed: TimerFailed) -> None:
        self.job, self.stage, self.worker = job, stage.name, worker
        self.event_time = event_time
        self.tasks = tasks
        self.time = time
        self.timer_failed = timer_failed
        self.source: SourceWatermarks | None = None
        self.channels: ChannelWatermarks | None = None
        self.late_records: LateRecordHandler | None = None
        self._from_value = event_time is not None and event_time.timestamp is not None and channels is None
        self._emitted: WatermarkStatus | None = None
        init_time_metrics(job, stage.name)
        if event_time is None:
            return
        if channels is None:
            self.source = SourceWatermarks(event_time, reads)
        else:
            self.channels = ChannelWatermarks(channels)
        if stage.forwards_to is None:  # an exchange reader forwards late records: its stage judges them
            self.late_records = LateRecordHandler(client, job, stage)

    @property
    def has_watermark(self) -> bool:
        return self.source is not None or self.channels is not None

    @property
    def extracts_from_value(self) -> bool:
        """True when a record's event time needs its decoded value."""
        return self._from_value

    # ------------------------------------------------------------------ records

    def event_time_of(self, record: InputRecord, value: Any) -> int:
        """A record's event time: the source stage's extractor's, a channel record's own, else
        the Kafka timestamp."""
        if self._from_value:
            return int(self.event_time.timestamp(value))  # type: ignore[union-attr,misc]
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

    # ------------------------------------------------------------------ moving time

    def end_of_batch(self, batch: dict[TaskId, list[OutputRecord]], unread: Unread | None) -> None:
        """A source stage's micro-batch was processed: its watermark moves. ``unread``: the
        consumer lag's (:meth:`~tidemark.runtime.consumer_lag.ConsumerLag.unread`), on the same
        monotonic clock."""
        if self.source is not None:
            self._advance(self.source.update(_monotonic_ms(), unread), batch)

    def tick(self, batch: dict[TaskId, list[OutputRecord]], unread: Unread | None) -> None:
        """Between micro-batches: idle partitions release the watermark, due processing-time timers fire."""
        self.end_of_batch(batch, unread)
        self._fire(TimeDomain.PROCESSING_TIME, self.time.clock(), batch)

    def channel_watermark(self, record: InputRecord, batch: dict[TaskId, list[OutputRecord]]) -> None:
        """A watermark record of a channel (in channel order: after the records before it)."""
        if self.channels is None or record.watermark is None or record.task is None:
            return  # an upstream with event time and this stage built without: nothing to do
        moved = self.channels.update(record.channel, record.watermark)
        if moved is not None:
            self._advance(moved, batch)

    def barrier(self, record: InputRecord) -> None:
        """A barrier of this attempt on a channel: the channel's watermark at the cut."""
        if self.channels is not None and record.barrier is not None and record.task is not None:
            self.channels.barrier(record.channel, record.barrier.checkpoint_id)

    def _advance(self, status: WatermarkStatus, batch: dict[TaskId, list[OutputRecord]]) -> None:
        if status.watermark <= self.time.watermark:
            return
        self.time.watermark = status.watermark
        WATERMARK.labels(self.job, self.stage).set(status.watermark / 1000)
        self.report_lag()
        self._fire(TimeDomain.EVENT_TIME, status.watermark, batch)

    def _fire(self, domain: TimeDomain, until: int, batch: dict[TaskId, list[OutputRecord]]) -> None:
        for task in self.tasks:
            if task.due(domain, until):
                outputs = task.fire(domain, until, self.timer_failed)
                if outputs:
                    batch.setdefault(task.task_id, []).extend(outputs)

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
