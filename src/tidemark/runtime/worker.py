"""The stage worker: one PySpark Structured Streaming query running one stage of a job.

Lifecycle (one attempt, numbered by its epoch): build the stage's tasks (one per key-group
range) -> restore them from a checkpoint or savepoint if one is given (state, operator state,
source positions, pending sink buffers, the channel cut) -> start the query (Tidemark's Kafka
source on Spark's Python Data Source API, from the restored positions) and write the ready file
-> for every micro-batch (``foreachBatch``): route each record by key group to its task, run the
user function, hand the results to the stage's output; between batches, act on the control
plane -> until a stop-with-savepoint completes (exit 0) or the attempt dies (the supervisor
restores a new attempt).

Checkpoints: a *source stage* (reading the job's input topics) checkpoints when the
coordinator's trigger arrives, at the next micro-batch boundary, with the positions after the
last processed record. A stage reading a *channel* checkpoints when the barriers written by every
upstream task are aligned (see :mod:`tidemark.runtime.alignment`), with the cut at the barriers.
Either way: pre-commit the output (channel: barriers downstream; exactly-once sink: seal the
write-ahead buffer), snapshot every task's keyed and operator state into checkpoint storage, ack
each task to the coordinator. Completed / aborted notifications commit / keep the output.

Time (:mod:`~tidemark.runtime.stage_time`): a source stage with
:class:`~tidemark.runtime.api.EventTime` moves its watermark at the end of every micro-batch and
on every tick between batches (:meth:`StageWorker.on_tick`, when a partition turns idle); a
stage reading a channel moves it when its channels' watermark records do. Each move fires the
event-time timers it passes and is written downstream after the records before it.
Processing-time timers fire on the ticks, so without input too.

This module is the batch loop and the control plane; the parts it drives live beside it: the
tasks and their backends (:mod:`~tidemark.runtime.stage_tasks`), the restore
(:mod:`~tidemark.runtime.stage_restore`), one checkpoint (:mod:`~tidemark.runtime.stage_checkpoint`),
the outputs (:mod:`~tidemark.runtime.outputs`) and the consumer lag
(:mod:`~tidemark.runtime.consumer_lag`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Iterable

from confluent_kafka.admin import AdminClient

from tidemark.broker.engine import tansu_selected
from tidemark.checkpoint.outcomes import DECLINED_SUBSUMED
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.checkpoint_store.metadata_codec import MetadataFormatError
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.keygroups import KeyGroupRange, compute_key_group_range
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.transactions import fence_transactional_ids
from tidemark.kafka.clients import base_config
from tidemark.kafka.metadata import TopicNotFoundError, list_partitions, metadata_consumer
from tidemark.kafka.topics import TopicNames, TopicSpec
from tidemark.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointMetadata,
    CheckpointTrigger,
    MaterializationEvent,
)
from tidemark.runtime.alignment import Aligned, BarrierAligner, Cancelled, Process
from tidemark.runtime.api import JobSpec, Stage, load_job
from tidemark.runtime.control import ControlPlane
from tidemark.runtime.faults import FAULTS
from tidemark.runtime.consumer_lag import ConsumerLag
from tidemark.runtime.metrics import RECORDS_IN, RECORDS_OUT, RESTORE_DURATION, init_worker_metrics
from tidemark.runtime.outputs import (
    AtLeastOnceOutput,
    ChannelOutput,
    OutputRecord,
    StageOutput,
    TwoPhaseCommitOutput,
)
from tidemark.runtime.stage_attempt import Attempt
from tidemark.runtime.record_errors import FunctionFailed, MalformedHeaders, MalformedInput, RecordFailures
from tidemark.runtime.records import InputRecord
from tidemark.runtime.ownership import channel_partitions_of, input_partitions_of, subtasks_of
from tidemark.runtime.physical_plan import physical_job, source_operators
from tidemark.runtime.routing import ChannelPartitioner, KeyGroupRouter
from tidemark.runtime.stage_checkpoint import StageCheckpointer
from tidemark.runtime.stage_restore import RestoredStage, restore_stage
from tidemark.runtime.stage_tasks import ChangelogTarget, build_stage_tasks
from tidemark.runtime.stage_time import StageClock
from tidemark.runtime.task import StageTask, StageTime
from tidemark.runtime.watermarks import Unread
from tidemark.chassis.logs import get_logger
from tidemark.spark.stage_source import ReadSelection
from tidemark.storage import open_storage
from tidemark.state.timers import Timer
from tidemark.storage.base import CorruptStateFile
from tidemark.types import Channel, CheckpointId, CheckpointType, CheckpointingMode, TaskId, TopicPartition

log = get_logger(__name__)


class StageWorker:
    def __init__(self, settings: TidemarkSettings, attempt: Attempt) -> None:
        self.settings = settings
        self.attempt = attempt
        self.topics = TopicNames(settings.topic_prefix)
        written = load_job(attempt.job_ref, attempt.job_args)
        self.spec: JobSpec = physical_job(written, attempt.workers,
                                          lambda stage: self.topics.exchange(written.job_id, stage))
        self.stage: Stage = self.spec.stage(attempt.stage)
        self.upstream = self.spec.upstream_of(self.stage)
        self.downstream = next((s for s in self.spec.stages if self.stage.output in s.inputs), None)
        self.job = self.spec.job_id
        self.epoch = attempt.epoch
        self.workers = self.stage.workers or 1
        self.subtasks = subtasks_of(attempt.worker, attempt.parallelism, self.workers)
        self.client = base_config(settings)
        self.read_partitions: list[TopicPartition] = []  # what this worker's query reads (prepare)
        self.storage = open_storage(settings.resolved_storage_url)
        self.lock = threading.RLock()
        self.tasks: list[StageTask] = []
        self.positions: dict[TopicPartition, int] = {}
        self.aligner: BarrierAligner | None = None
        self.output: StageOutput | None = None
        self.control: ControlPlane | None = None
        self.router: KeyGroupRouter | None = None
        self.restored_from: CheckpointMetadata | None = None
        self.stopping: CheckpointId | None = None
        self.finished = False
        self.abandoned = False  # the supervisor released the attempt (runtime.stage_process)
        self.closed = False
        self.processing = False  # set when the first records a task processed are counted (flush_outputs)
        self.checkpointer: StageCheckpointer | None = None
        self._batch: dict[TaskId, list[OutputRecord]] = defaultdict(list)
        self.time = StageTime()  # the watermark and clock the tasks share
        self.clock: StageClock | None = None  # watermarks, timers, late records (runtime.stage_time)
        self.failures = RecordFailures(self.client, self.topics, self.job, self.stage.on_error,
                                       settings.dead_letter_max_bytes)
        self._metadata = metadata_consumer(self.client)  # topic metadata and watermarks, for the attempt's life
        self._lag = ConsumerLag(self.client, self._metadata, self.job, self.stage.name, self.stage.inputs)
        self._local = ((settings.state_dir or settings.home / "state") / self.job / self.stage.name
                       / f"epoch-{self.epoch}" / f"worker-{attempt.worker}")

    # ------------------------------------------------------------------ set-up

    @property
    def is_source(self) -> bool:
        return self.upstream is None

    def prepare(self) -> None:
        """Topics, tasks, restore, output, control plane: everything before the query starts."""
        spec, stage = self.spec, self.stage
        if self.is_source:  # a missing input topic stops the job before Spark starts (runtime.start_errors)
            list_partitions(self._metadata, stage.inputs)
        admin = AdminClient(dict(self.client))
        ensure_topics(admin, [TopicSpec(stage.output, spec.output_partitions)])
        if self.upstream is not None:
            ensure_topics(admin, [TopicSpec(self.upstream.output, spec.output_partitions)])
        if stage.late_output is not None:
            ensure_topics(admin, [TopicSpec(stage.late_output, spec.output_partitions)])
        self.read_partitions = self._read_partitions()
        init_worker_metrics(self.job)
        self.control = ControlPlane(self.client, self.topics, self.job,  # before anything can trigger
                                    materializations=spec.changelog)
        started = time.monotonic()
        shutil.rmtree(self._local, ignore_errors=True)
        changelog = (ChangelogTarget(self.client, self.changelog_topic, self._changelog_partitions(), self.epoch,
                                     self.storage) if spec.changelog else None)
        self.tasks = build_stage_tasks(spec, stage, self.attempt.parallelism, self._local, changelog, self.subtasks,
                                       self.time)
        self.router = KeyGroupRouter(spec.max_parallelism, [t.key_groups for t in self.tasks],
                                     complete=self.workers == 1)
        self.clock = StageClock(self.job, stage, self.attempt.worker, spec.event_time_of(stage), self.tasks, self.time,
                                self.client, reads=self.read_partitions,
                                channels=self._channels() if self.upstream is not None else None,
                                timer_failed=self._timer_failed)
        restored = self._restore() if self.attempt.restore_path else None
        if restored is not None:
            self.clock.restore(restored.watermark_items)
        self.output = self._create_output()
        self.output.recover(restored.sink_items if restored else [],
                            restored.metadata.checkpoint_id if restored else CheckpointId(0))
        for task in self.tasks:
            task.open()
        if self.upstream is not None:
            self.aligner = BarrierAligner(spec.mode, self.epoch, self._channels(), restored.cut if restored else {})
        self.checkpointer = StageCheckpointer(self.job, stage.name, stage.operator_id, spec.mode, self.epoch,
                                              self.tasks, self.output, self.storage, self.control)
        RESTORE_DURATION.labels(self.job).set(time.monotonic() - started if restored else 0)

    def _restore(self) -> RestoredStage:
        path = self.attempt.restore_path or ""
        try:
            metadata = read_metadata(self.storage, path)
            if metadata.job_id != self.job:
                raise ValueError(f"{path} belongs to job {metadata.job_id}, not {self.job}")
            restored = restore_stage(metadata, self.stage.operator_id, self.tasks, self.storage,
                                     source_operators(self.stage), set(self.read_partitions))
        except (CorruptStateFile, MetadataFormatError) as exc:  # the supervisor will not restore it again
            log.error("restore failed: checkpoint corrupted", job=self.job, stage=self.stage.name, checkpoint=path,
                      error=str(exc))
            raise
        self.restored_from = metadata
        self.positions.update(restored.positions)
        log.info("restored", job=self.job, stage=self.stage.name, checkpoint=metadata.checkpoint_id,
                 epoch=self.epoch, positions=len(self.positions), pending_buffers=len(restored.sink_items),
                 rebased=restored.rebased)
        return restored

    def _transactional_id(self, worker: int) -> str:
        """Worker 0's is the stage's (as with one worker), the others' get ``.w<n>``."""
        base = f"{self.topics.prefix}.{self.job}.{self.stage.name}"
        return base if worker == 0 else f"{base}.w{worker}"

    def _fence_orphans(self) -> None:
        """Abort what workers of an earlier attempt with more workers left open: worker ``w`` fences
        the ids of ``w + W``, ``w + 2W``, ... below the parallelism (no live worker has them; an open
        transaction would hold the readers of the output back until the broker times it out; ids of
        workers beyond an earlier, larger parallelism are left to that timeout)."""
        if self.spec.mode is CheckpointingMode.AT_LEAST_ONCE and not self.spec.is_channel(self.stage):
            return  # the at-least-once sink is not transactional
        ids = [self._transactional_id(w) for w in range(self.attempt.worker + self.workers,
                                                          self.attempt.parallelism, self.workers)]
        if ids:  # in the background: it only unblocks readers sooner, and must not delay the start
            threading.Thread(target=fence_transactional_ids, args=(self.client, ids), name="fence-orphans",
                             daemon=True).start()

    def _create_output(self) -> StageOutput:
        spec, stage = self.spec, self.stage
        txid = self._transactional_id(self.attempt.worker)
        self._fence_orphans()
        if spec.is_channel(stage):
            partitions = self._partitions(stage.output)
            assert self.downstream is not None
            partitioner = (ChannelPartitioner(self.downstream, spec.max_parallelism, partitions)
                           if (self.downstream.workers or 1) > 1 else None)
            return ChannelOutput(self.client, stage.output, partitions, txid, self.epoch, partitioner,
                                 tasks=[t.task_id for t in self.tasks], event_time=self.clock.has_watermark)
        if spec.mode is CheckpointingMode.EXACTLY_ONCE:
            return TwoPhaseCommitOutput(self.client, stage.output, self.job, stage.operator_id, txid,
                                        self.topics.sink_commits, hold_until_commit=tansu_selected())
        return AtLeastOnceOutput(self.client, stage.output)

    @property
    def changelog_topic(self) -> str:
        return self.topics.changelog(self.job, self.stage.name)

    def _changelog_partitions(self, timeout_s: float = 120.0) -> int:
        """Partitions of the stage's changelog topic, which the changelog service creates when the
        supervisor announces the attempt; waits for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._partitions(self.changelog_topic)
            except TopicNotFoundError:
                if time.monotonic() > deadline:
                    raise TopicNotFoundError(
                        f"changelog topic {self.changelog_topic} was not created within {timeout_s:g}s: "
                        "is the changelog service running?") from None
                time.sleep(0.5)

    def _partitions(self, topic: str) -> int:
        return len(list_partitions(self._metadata, [topic]))

    def _read_partitions(self) -> list[TopicPartition]:
        """The input partitions this worker reads (runtime.ownership): all of them with one worker;
        a share of them in a source stage's worker; the partitions of its own key groups in a
        channel stage's."""
        partitions = sorted(list_partitions(self._metadata, self.stage.inputs))
        if self.workers == 1:
            return partitions
        if self.is_source:
            return input_partitions_of(self.attempt.worker, self.workers, partitions)
        first, last = self.subtasks[0], self.subtasks[-1]
        owned = KeyGroupRange(compute_key_group_range(self.spec.max_parallelism, self.attempt.parallelism, first).start,
                              compute_key_group_range(self.spec.max_parallelism, self.attempt.parallelism, last).end)
        counts = defaultdict(int)
        for topic, _ in partitions:
            counts[topic] += 1
        return [TopicPartition(topic, p) for topic in sorted(counts)
                for p in channel_partitions_of(owned, self.spec.max_parallelism, counts[topic])]

    def _channels(self) -> set[Channel]:
        assert self.upstream is not None
        upstream = [a.task_id for a in plan_assignments((self.upstream.operator_id,), self.attempt.parallelism,
                                                        self.spec.max_parallelism)]
        return {Channel(topic, partition, task) for topic, partition in self.read_partitions for task in upstream}

    def read_selection(self) -> ReadSelection:
        """What the query reads and from where: the restored positions (partitions not named
        start at the earliest), else the earliest; subscribed with one worker, assigned with more."""
        return ReadSelection(tuple(self.stage.inputs), tuple(self.read_partitions), assigned=self.workers > 1,
                             positions=dict(self.positions), max_records=self.stage.max_records_per_batch)

    # ------------------------------------------------------------------ records

    def on_batch(self, records: Iterable[InputRecord]) -> None:
        """One micro-batch, then the control plane (called under ``lock``)."""
        if self.finished:
            return
        self.wait_while_stopping()
        if self.aligner is None:  # a source stage: it checkpoints between batches, never inside one
            positions = self.positions
            handle = self._forward if self.stage.forwards_to is not None else self._process
            for record in records:
                # per record: the plain tuple, equal to its TopicPartition (see types.TopicPartition)
                positions[(record.topic, record.partition)] = record.offset + 1  # type: ignore[index]
                if record.header_error is not None:
                    self.failures.record_failed(record, MalformedHeaders(record.header_error))
                elif record.barrier is None and record.watermark is None:  # copied into an input topic: nothing here
                    handle(record)
            self.clock.end_of_batch(self._batch, self._unread())  # type: ignore[union-attr]
        else:
            for record in records:
                if self.finished:  # a stop-with-savepoint completed while aligning
                    return
                self._feed(record)
        self.flush_outputs()
        FAULTS.hit("after-batch")
        if FAULTS.armed("after-changelog-write"):  # make the batch's changes reach the changelog first
            for task in self.tasks:
                task.backend.flush()
            FAULTS.hit("after-changelog-write")
        self.handle_control()

    def on_tick(self) -> None:
        """Between micro-batches (called under ``lock``): idle partitions release the watermark,
        due processing-time timers fire, and what that emits is written; then the control plane."""
        if self.finished or self.stopping is not None:
            return
        self.clock.tick(self._batch, self._unread())  # type: ignore[union-attr]
        self.flush_outputs()
        self.handle_control()

    def _feed(self, record: InputRecord) -> None:
        assert self.aligner is not None
        self.positions[record.topic_partition] = record.offset + 1
        if record.header_error is not None or record.epoch is None or record.task is None:
            self.failures.record_failed(record, MalformedHeaders(
                record.header_error or "a channel record without tidemark-epoch and tidemark-task headers"))
            return
        if record.barrier is not None and record.epoch == self.epoch:
            self.clock.barrier(record)  # type: ignore[union-attr]
        for action in self.aligner.feed(record, now_ms()):
            if isinstance(action, Process):
                if action.record.watermark is not None:
                    self.clock.channel_watermark(action.record, self._batch)  # type: ignore[union-attr]
                else:
                    self._process(action.record)
            elif isinstance(action, Aligned):
                self.flush_outputs()
                self.checkpoint(action.barrier.checkpoint_id, action.barrier.checkpoint_type, action)
            elif isinstance(action, Cancelled):
                for task in self.tasks:
                    self.control.decline(action.checkpoint_id, task.task_id,  # type: ignore[union-attr]
                                         f"{DECLINED_SUBSUMED}: alignment overtaken by a newer barrier", self.epoch)
        if record.barrier is not None and self.aligner.aligning is not None:
            FAULTS.hit("during-alignment")

    def _process(self, record: InputRecord) -> None:
        """Run one record through its task; a failure goes to the stage's error policy."""
        clock = self.clock
        assert clock is not None
        try:
            value = self.stage.decode(record.key, record.value)
            key = self.stage.key_by(value)
            index = self.router.task_index(key)  # type: ignore[union-attr]
            stamp = clock.event_time_of(record, value)
        except Exception as exc:
            self.failures.record_failed(record, MalformedInput(f"{type(exc).__name__}: {exc}"))
            return
        if index < 0:  # another worker's key group, in a partition both read (runtime.ownership)
            return
        clock.observe(record, stamp)
        if clock.late(record, stamp):
            return
        task = self.tasks[index]
        try:
            outputs = task.process(key, value, stamp)
        except Exception as exc:
            self.failures.record_failed(record, FunctionFailed(f"{type(exc).__name__}: {exc}"))
            return
        if outputs:
            self._batch[task.task_id].extend(outputs)

    def _forward(self, record: InputRecord) -> None:
        """An exchange reader's record (runtime.physical_plan): checked to decode and key as its
        stage will, then forwarded unchanged into the partition of its key group, with its event
        time (the watermarks are the reader's: it reads the partitions)."""
        output, clock = self.output, self.clock
        assert isinstance(output, ChannelOutput) and output.partitioner is not None and clock is not None
        partitioner = output.partitioner
        try:
            if clock.extracts_from_value:  # decode once for both
                value = partitioner.decode(record.key, record.value)
                partition, stamp = partitioner.of_value(value), clock.event_time_of(record, value)
            else:
                partition, stamp = partitioner(record.key, record.value), clock.event_time_of(record, None)
        except Exception as exc:
            self.failures.record_failed(record, MalformedInput(f"{type(exc).__name__}: {exc}"))
            return
        clock.observe(record, stamp)
        task = self.tasks[record.partition % len(self.tasks)]
        task.records_in += 1
        self._batch[task.task_id].append((record.key, record.value, stamp, partition))  # type: ignore[arg-type]

    def _timer_failed(self, timer: Timer, error: Exception) -> None:
        """``on_timer`` raised: the stage's error policy, with the timer as the record's origin."""
        origin = InputRecord(f"<{timer.domain.value} timer>", -1, timer.timestamp, timer.timestamp,
                             self.stage.encode_key(timer.key), None)
        self.failures.record_failed(origin, FunctionFailed(f"on_timer: {type(error).__name__}: {error}"))

    def _first_records_processed(self) -> None:
        self.processing = True  # the moment a recovery ends (bench/bench_recovery.py)
        log.info("first records processed", job=self.job, stage=self.stage.name, epoch=self.epoch)
        self.attempt.processing_file.touch()

    def _unread(self) -> Unread | None:
        """The partitions with records not read yet; None when not known (runtime.consumer_lag)."""
        return self._lag.unread(self.positions)

    def flush_outputs(self) -> None:
        """Hand the results gathered so far and the watermark, if news, to the output; count what
        the tasks read and the timers did meanwhile. The first records an attempt processed are
        noticed here, where every count passes (also those of a batch whose barrier completed an
        alignment, flushed before its checkpoint)."""
        for task in self.tasks:
            read, task.records_in = task.records_in, 0
            if read:
                RECORDS_IN.labels(self.job, task.task_id).inc(read)
                if not self.processing:
                    self._first_records_processed()
        clock = self.clock
        assert clock is not None
        clock.count_timers()
        watermark = clock.to_emit()
        if not self._batch and watermark is None:
            return
        batch, self._batch = dict(self._batch), defaultdict(list)
        self.output.write(batch, watermark)  # type: ignore[union-attr]
        if watermark is not None:
            clock.emitted(watermark)
        for task, records in batch.items():
            RECORDS_OUT.labels(self.job, task).inc(len(records))

    # ------------------------------------------------------------------ checkpoints

    def handle_control(self) -> None:
        """Act on new notifications of this attempt (called under ``lock``)."""
        assert self.control is not None and self.output is not None
        for note in self.control.poll():
            if isinstance(note, MaterializationEvent):
                for task in self.tasks:
                    task.on_materialization(note)
                continue
            if note.epoch != self.epoch:
                continue
            if isinstance(note, CheckpointTrigger):
                if self.is_source and not self.finished and self.stopping is None:
                    self.flush_outputs()
                    self.checkpoint(note.checkpoint_id, note.checkpoint_type, None, note.target_location)
            elif isinstance(note, CheckpointCompleted):
                self.output.commit(note.checkpoint_id)
                for task in self.tasks:
                    task.notify_completed(note.checkpoint_id)
                if note.checkpoint_id == self.stopping:
                    self.finished = True
                    log.info("stop-with-savepoint completed; finishing", job=self.job, stage=self.stage.name,
                             savepoint=note.checkpoint_id)
            elif isinstance(note, CheckpointAborted):
                self.output.abort(note.checkpoint_id)
                for task in self.tasks:
                    task.notify_aborted(note.checkpoint_id)
                if note.checkpoint_id == self.stopping:
                    log.warning("stop-with-savepoint aborted; resuming", job=self.job, reason=note.reason)
                    self.stopping = None

    def wait_while_stopping(self) -> None:
        """After a stop-with-savepoint snapshot: process nothing until it completes or aborts (or
        the attempt is abandoned)."""
        while self.stopping is not None and not self.finished and not self.abandoned:
            self.handle_control()
            time.sleep(0.05)

    def checkpoint(self, checkpoint_id: CheckpointId, kind: CheckpointType, aligned: Aligned | None,
                   target: str | None = None) -> None:
        assert self.checkpointer is not None and self.clock is not None
        taken = self.checkpointer.checkpoint(checkpoint_id, kind, self.positions, aligned, target,
                                             self.clock.snapshot_item(checkpoint_id))
        if taken and kind is CheckpointType.STOP_WITH_SAVEPOINT:
            self.stopping = checkpoint_id
            self.wait_while_stopping()

    # ------------------------------------------------------------------ monitoring

    def report_lag(self) -> None:
        self._lag.report(self.positions, self.read_partitions)
        if self.clock is not None:
            self.clock.report_lag()

    def abandon(self) -> None:
        """The attempt is over (released): a batch waiting on the control plane stops waiting."""
        self.abandoned = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for task in self.tasks:
            task.close()
        if self.output is not None:
            self.output.close()
        if self.control is not None:
            self.control.close()
        self.failures.close()
        if self.clock is not None:
            self.clock.close()
        self._metadata.close()
        shutil.rmtree(self._local, ignore_errors=True)

