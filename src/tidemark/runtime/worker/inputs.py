"""A stage worker's input, two strategies: the job's input topics (:class:`SourceInput`) or a
channel from the stage before (:class:`ChannelInput`); and the record path both share
(:class:`RecordPath`).

* A source stage checkpoints when the coordinator's trigger arrives, with the positions after the
  last record it processed: inside a micro-batch, at the record it reached (Flink's sources
  checkpoint between any two records), unless a Spark step made its rows (then between batches);
  its watermark moves at the end of each batch.
* A channel stage checkpoints when the barriers of every upstream task are aligned
  (:mod:`tidemark.runtime.worker.alignment`), with the cut at the barriers; its watermark moves with the
  channels' watermark records.

Either way each record updates the worker's positions and takes the record path: decode, key,
route to the task of its key group (in a stage without a key: the task of its partition), event
time, late or not (for the window operator: late or not as its windows say), the task's operator;
a record that fails goes to the stage's error policy with its origin. An exchange reader (a source stage that
forwards to its keyed stage, :mod:`tidemark.runtime.job.physical_plan`) forwards each record into the
partition of its key group instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from tidemark.clock import now_ms
from tidemark.checkpoint.outcomes import DECLINED_SUBSUMED
from tidemark.runtime.worker.alignment import Aligned, BarrierAligner, Cancelled, Process
from tidemark.api import Input, Stage
from tidemark.runtime.job.faults import FAULTS
from tidemark.runtime.worker.local_channel import LOCAL_TOPIC
from tidemark.runtime.worker.outputs import EVERY_PARTITION, LOCAL_PARTITION
from tidemark.runtime.worker.routing import KeyGroupRouter, KeyPartitioner
from tidemark.keygroups import assign_to_key_group
from tidemark.runtime.worker.record_errors import (FunctionFailed, MalformedHeaders, MalformedInput, NotCoPartitioned,
                                                   RecordFailures, RejectedBySparkStep)
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.clock import StageClock
from tidemark.runtime.worker.task import StageTask
from tidemark.runtime.worker.watermarks import Unread
from tidemark.state.serializers import TaggedSerializer
from tidemark.types import CheckpointId, CheckpointType, Epoch, TopicPartition


_CONTROL_EVERY = 4095  # the worker looks at the control plane (when due) after every 4,096 records


class Checkpoints(Protocol):
    """What an input asks of the worker when its barriers say so (:class:`StageRunner`)."""

    finished: bool

    def checkpoint(self, checkpoint_id: CheckpointId, kind: CheckpointType, aligned: Aligned | None) -> None: ...

    def within_batch(self, cut: Callable[[], None] | None = None) -> None:
        """``cut``: a source stage's checkpoint may be taken here, after ``cut()`` moved the
        positions to the records processed so far; None: not inside this batch."""
        ...

    def decline(self, checkpoint_id: CheckpointId, reason: str) -> None: ...


class _Way:
    """How the records of one input topic take the path: decode, key, and which of the stage's
    inputs they are (a two-input function's ``process_element1`` or ``2``); a broadcast input's
    go to every task."""

    __slots__ = ("decode", "key_by", "index", "broadcast", "co_partitioned")

    def __init__(self, stage: Stage, item: Input, index: int) -> None:
        # an input with a Spark step read through the exchange: its reader forwarded the step's rows
        stepped = item.topic in stage.exchanged and stage.spark_step_of(item) is not None
        self.decode = decode_forwarded_row if stepped else stage.decode_of(item)
        self.key_by = stage.key_of(item)
        self.index = index
        self.broadcast = item.broadcast
        # read directly by the workers owning its partitions' key groups (runtime.job.physical_plan)
        self.co_partitioned = item.co_partitioned and stage.exchange is None


class RecordPath:
    """One record from the input to its task's operator (see the module)."""

    def __init__(self, stage: Stage, tasks: Sequence[StageTask], router: KeyGroupRouter, clock: StageClock,
                 failures: RecordFailures, copies_from: Mapping[str, int] | None = None) -> None:
        """``copies_from``: of each exchange topic carrying a broadcast input's elements, the
        partition whose copies this worker takes (the first of the exchange's that it reads)."""
        self.stage, self.tasks, self.router, self.clock, self.failures = stage, tasks, router, clock, failures
        self.copies_from = dict(copies_from or {})
        self.ways = {item.topic: _Way(stage, item, index) for index, item in enumerate(stage.input_list)}
        only = next(iter(self.ways.values())) if len(self.ways) == 1 else None
        exchanged = [self.ways[topic] for topic in stage.exchanged]
        # an exchange's records name their input topic; one written before they did is its only input's
        self._unnamed = exchanged[0] if len(exchanged) == 1 else None
        self._only = only
        self.process: Callable[[InputRecord], None] = self._keyed if stage.keyed else self._unkeyed
        self.operator_judges_lateness = bool(tasks) and tasks[0].operator.judges_lateness

    def way(self, record: InputRecord) -> _Way:
        """The input ``record`` belongs to."""
        if self._only is not None:
            return self._only
        way = self.ways.get(record.origin or record.topic)
        if way is None:
            if record.origin is None and self._unnamed is not None:
                return self._unnamed
            raise ValueError(f"the record names input {record.origin!r}, which stage {self.stage.name} does not read")
        return way

    def _keyed(self, record: InputRecord) -> None:
        """A keyed stage: the record goes to the task of its key's group."""
        try:
            way = self._only or self.way(record)  # one input: no lookup per record
            value = way.decode(record.key, record.value) if record.row is None else record.row
            broadcast = way.broadcast
            key = None if broadcast else way.key_by(value)  # type: ignore[misc]
            index = -1 if broadcast else self.router.task_index(key)
            stamp = self.clock.event_time_of(record, value)
        except Exception as exc:
            self.failures.record_failed(record, MalformedInput(f"{type(exc).__name__}: {exc}"))
            return
        if broadcast:
            self._broadcast(record, value, stamp, way.index)
        elif index >= 0:
            self._run(record, index, key, value, stamp, way.index)
        elif way.co_partitioned:  # no other worker reads this partition: the record is in the wrong one
            group = assign_to_key_group(key, self.router.max_parallelism)
            self.failures.record_failed(record, NotCoPartitioned(
                f"key {key!r} (key group {group}) is not in the partition of its key group: the input is declared "
                f"co-partitioned but its producer did not write it into key_partition(key, partitions)"))
        # else another worker's key group, in a partition both read (runtime.job.ownership)

    def _unkeyed(self, record: InputRecord) -> None:
        """A stage without a key: the record goes to the task of its partition (each of the
        worker's tasks takes the partitions ``p`` with ``p % tasks == i``), in partition order."""
        try:
            way = self._only or self.way(record)
            value = way.decode(record.key, record.value) if record.row is None else record.row
            stamp = self.clock.event_time_of(record, value)
        except Exception as exc:
            self.failures.record_failed(record, MalformedInput(f"{type(exc).__name__}: {exc}"))
            return
        if way.broadcast:
            self._broadcast(record, value, stamp, way.index)
        else:
            self._run(record, record.partition % len(self.tasks), None, value, stamp, way.index)

    def _broadcast(self, record: InputRecord, value: Any, stamp: int, side: int) -> None:
        """A broadcast input's element: to every task of the worker, in task order, never late (it
        is no event of the stage's own input, Flink's broadcast side). Through an exchange, each
        partition carries a copy: the worker takes the one in the first partition it reads, whose
        place between the barriers is every copy's. When the function raises on a task, the
        others still apply it and the element goes to the error policy once."""
        first = self.copies_from.get(record.topic)
        if first is not None and record.partition != first:
            return
        self.clock.observe(record, stamp)
        failed: Exception | None = None
        for n, task in enumerate(self.tasks):
            try:
                task.process(None, value, stamp, side)
            except Exception as exc:
                failed = failed or exc
            if n == 0:
                FAULTS.hit("during-broadcast")
        if failed is not None:
            self.failures.record_failed(record, FunctionFailed(f"{type(failed).__name__}: {failed}"))

    def _run(self, record: InputRecord, index: int, key: Any, value: Any, stamp: int, side: int) -> None:
        """Event time and lateness, then the task's operator; a failure goes to the error policy."""
        clock = self.clock
        clock.observe(record, stamp)
        if not self.operator_judges_lateness and clock.late(record, stamp):
            return
        try:
            taken = self.tasks[index].process(key, value, stamp, side)
        except Exception as exc:
            self.failures.record_failed(record, FunctionFailed(f"{type(exc).__name__}: {exc}"))
            return
        if taken is False:
            clock.too_late(record, stamp)

    def forwarder(self, partitioner: KeyPartitioner | None,
                  local: KeyGroupRouter | None = None) -> Callable[[InputRecord], None]:
        """An exchange reader's record path: each record checked to decode and key as its stage
        will (its inputs here are its stage's), then forwarded unchanged with its event time and
        input topic into the partition of its key group (``partitioner``; None: its stage has one
        worker or no key, any partition will do); a broadcast input's element into every partition. The watermarks are the reader's: it reads the
        partitions. A Spark step's row is forwarded in its place, encoded by the tagged codec
        (:func:`decode_forwarded_row` reads it). ``local``: in a fused worker, the router of its
        own key groups; a record whose key group it owns goes to
        :data:`~tidemark.runtime.worker.outputs.LOCAL_PARTITION` with its decoded value, not
        encoded (:mod:`tidemark.runtime.worker.local_channel`)."""
        clock, tasks, failures, way_of = self.clock, self.tasks, self.failures, self.way
        owned = local.task_index if local is not None else None

        def forward(record: InputRecord) -> None:
            try:
                way = way_of(record)
                value = way.decode(record.key, record.value) if record.row is None else record.row
                key = way.key_by(value) if way.key_by is not None else None
                partition = (EVERY_PARTITION if way.broadcast else
                             LOCAL_PARTITION if owned is not None and owned(key) == 0 else  # routes the key
                             partitioner.of_key(key) if partitioner is not None else None)
                stamp = clock.event_time_of(record, value)
            except Exception as exc:
                failures.record_failed(record, MalformedInput(f"{type(exc).__name__}: {exc}"))
                return
            clock.observe(record, stamp)
            task = tasks[record.partition % len(tasks)]
            task.records_in += 1
            if partition == LOCAL_PARTITION:
                task.output.append((record.key, record.value, stamp, LOCAL_PARTITION, record.topic, value))  # type: ignore[arg-type]
                return
            forwarded = record.value if record.row is None else ROW_CODEC.serialize(record.row)
            task.output.append((record.key, forwarded, stamp, partition, record.topic))  # type: ignore[arg-type]

        return forward


ROW_CODEC = TaggedSerializer()


def decode_forwarded_row(key: bytes | None, value: bytes | None) -> Any:
    """A Spark step's row as its exchange reader forwarded it."""
    if value is None:
        raise ValueError("a forwarded row has no value")
    return ROW_CODEC.deserialize(value)


class SourceInput:
    """The job's input topics: records in order per partition; checkpoints on the trigger."""

    takes_triggers = True

    def __init__(self, path: RecordPath, positions: dict[TopicPartition, int], unread: Callable[[], Unread | None],
                 forwards: bool = False, partitioner: KeyPartitioner | None = None,
                 local: KeyGroupRouter | None = None) -> None:
        """``forwards``: an exchange reader's (``partitioner``, ``local``: see :meth:`RecordPath.forwarder`)."""
        self.positions, self.unread, self.clock, self.failures = positions, unread, path.clock, path.failures
        self.handle = path.forwarder(partitioner, local) if forwards else path.process

    def feed(self, records: Iterable[InputRecord], checkpoints: Checkpoints,
             ends: Mapping[TopicPartition, int] | None = None,
             ends_after: Callable[[int], Mapping[TopicPartition, int]] | None = None) -> None:
        """A micro-batch; then the watermark moves. ``ends``: the batch's end offsets per
        partition, when known (from its rows, or from the query's offset log when a Spark step may
        have left records out of ``records``): the positions move to them at the end, and are not
        kept per record; else per record. ``ends_after(n)``: the positions after the batch's first
        ``n`` records (one record per row: no Spark step), computed only when a checkpoint is
        taken inside the batch; without it (and with ``ends``) checkpoints wait for the batch's end."""
        positions, handle, failures = self.positions, self.handle, self.failures
        per_record = ends is None
        cuttable = per_record or ends_after is not None
        for n, record in enumerate(records, 1):
            if not n & _CONTROL_EVERY:
                checkpoints.within_batch(self._cut(n - 1, ends_after) if cuttable else None)
            if per_record:  # the plain tuple, equal to its TopicPartition (see types.TopicPartition)
                positions[(record.topic, record.partition)] = record.offset + 1  # type: ignore[index]
            if record.header_error is not None:
                failures.record_failed(record, MalformedHeaders(record.header_error))
            elif record.step_rejected is not None:
                failures.record_failed(record, RejectedBySparkStep(
                    f"the Spark step gave no value for {record.step_rejected}"))
            elif record.barrier is None and record.watermark is None:  # copied into an input topic: nothing here
                handle(record)
        for partition, end in (ends or {}).items():
            if end > positions.get(partition, -1):
                positions[partition] = end
        self.clock.end_of_batch(self.unread())

    def _cut(self, done: int, ends_after: Callable[[int], Mapping[TopicPartition, int]] | None) -> Callable[[], None]:
        """What moves the positions to after the batch's first ``done`` records (kept per record
        without ``ends_after``: nothing to move)."""
        def cut() -> None:
            for partition, end in (ends_after(done) if ends_after is not None else {}).items():
                if end > self.positions.get(partition, -1):
                    self.positions[partition] = end
        return cut

    def tick(self) -> None:
        """Between batches: idle partitions may release the watermark."""
        self.clock.tick(self.unread())


def without_local(aligned: Aligned) -> Aligned:
    """The cut a checkpoint keeps: a fused worker's local channels are left out (neither its
    channel cut nor its positions ever name them: a restore reads their records again from the
    reader's positions, :mod:`tidemark.runtime.worker.local_channel`)."""
    if not any(topic == LOCAL_TOPIC for topic, _, _ in aligned.cut):
        return aligned
    return dataclasses.replace(aligned, cut={c: o for c, o in aligned.cut.items() if c[0] != LOCAL_TOPIC})


class ChannelInput:
    """A channel from the stage before: records, barriers and watermarks of every upstream task,
    aligned (exactly-once) or not (at-least-once) by the :class:`BarrierAligner`."""

    takes_triggers = False

    def __init__(self, path: RecordPath, positions: dict[TopicPartition, int], aligner: BarrierAligner,
                 epoch: Epoch) -> None:
        self.path, self.positions, self.aligner, self.epoch = path, positions, aligner, epoch
        self.clock, self.failures = path.clock, path.failures

    def feed(self, records: Iterable[InputRecord], checkpoints: Checkpoints,
             ends: Mapping[TopicPartition, int] | None = None,
             ends_after: Callable[[int], Mapping[TopicPartition, int]] | None = None) -> None:
        """``ends``, ``ends_after``: not used (a channel's positions move with each record: an
        alignment may complete, and its checkpoint cut the positions, inside a batch)."""
        for n, record in enumerate(records, 1):
            if checkpoints.finished:  # a stop-with-savepoint completed while aligning
                return
            if not n & _CONTROL_EVERY:
                checkpoints.within_batch()
            self._feed(record, checkpoints)

    def _feed(self, record: InputRecord, checkpoints: Checkpoints) -> None:
        if record.topic != LOCAL_TOPIC:  # a local channel has no position: never persisted
            self.positions[record.topic_partition] = record.offset + 1
        if record.header_error is not None or record.epoch is None or record.task is None:
            self.failures.record_failed(record, MalformedHeaders(
                record.header_error or "a channel record without tidemark-epoch and tidemark-task headers"))
            return
        if record.barrier is not None and record.epoch == self.epoch:
            self.clock.barrier(record)
        for action in self.aligner.feed(record, now_ms()):
            if isinstance(action, Process):
                if action.record.watermark is not None:
                    self.clock.channel_watermark(action.record)
                else:
                    self.path.process(action.record)
            elif isinstance(action, Aligned):
                checkpoints.checkpoint(action.barrier.checkpoint_id, action.barrier.checkpoint_type,
                                       without_local(action))
            elif isinstance(action, Cancelled):
                checkpoints.decline(action.checkpoint_id,
                                    f"{DECLINED_SUBSUMED}: alignment overtaken by a newer barrier")
        if record.barrier is not None and self.aligner.aligning is not None:
            FAULTS.hit("during-alignment")

    def tick(self) -> None:
        """Between batches: the channels' watermark records move time, not the clock; due
        processing-time timers fire."""
        self.clock.tick(None)
