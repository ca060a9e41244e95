"""The stage runner: one attempt of a stage worker once it is wired and restored
(:func:`tidemark.runtime.worker.bootstrap.bootstrap`), driven by the streaming query
(:mod:`tidemark.runtime.worker.query`).

For every micro-batch (:meth:`StageRunner.on_batch`, under :attr:`StageRunner.lock`) the input
(:mod:`tidemark.runtime.worker.inputs`: the job's input topics or a channel) takes each record to
its task's operator; the runner hands what the operators emitted and the watermark, if news, to
the stage's output (:meth:`StageRunner.flush_outputs`), then acts on the control plane. Between
batches (:meth:`StageRunner.on_tick`) idle partitions may release the watermark and due
processing-time timers fire.

Checkpoints (:meth:`StageRunner.checkpoint`), at the coordinator's trigger in a source stage or
at an aligned barrier in a channel stage: each task's ``prepare_snapshot_pre_barrier``, the output
gets what that emitted, then :class:`~tidemark.runtime.worker.checkpoint.StageCheckpointer`
pre-commits the output, snapshots the tasks and acks. Completed / aborted notifications commit /
keep the output and reach every task's operator, also inside a long batch
(:meth:`StageRunner.within_batch`: the control plane looked at every ``CONTROL_IN_BATCH_S``), so
that results are committed while the next batch is processed. A source stage takes a trigger
there too, at the record its input reached (a first micro-batch of 100,000 records at a fraction
of a core takes seconds: its first results are committed after 2 s, not after the batch); a
stop-with-savepoint, and any trigger inside a batch a Spark step made, waits for the batch's
end. A completed stop-with-savepoint finishes the operators and ends the attempt (exit 0);
until then, after its snapshot, nothing is processed.
The runner owns no Kafka client of its own: its parts do (the output, the control plane, the
record failures, the clock's late records, the consumer lag's metadata consumer).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointMetadata,
    CheckpointTrigger,
    MaterializationEvent,
    StateAnswer,
    StateQuery,
)
from tidemark.runtime.worker.alignment import Aligned
from tidemark.api import Stage
from tidemark.runtime.worker.consumer_lag import ConsumerLag
from tidemark.runtime.job.control import ControlPlane
from tidemark.runtime.job.faults import FAULTS
from tidemark.runtime.job.metrics import BATCH_DURATION, RECORDS_IN, RECORDS_OUT
from tidemark.runtime.worker.outputs import StageOutput
from tidemark.runtime.worker.record_errors import RecordFailures
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.job.attempt import Attempt
from tidemark.runtime.worker.checkpoint import StageCheckpointer
from tidemark.runtime.worker.inputs import ChannelInput, SourceInput
from tidemark.runtime.worker.live_state import answer
from tidemark.runtime.worker.clock import StageClock
from tidemark.runtime.worker.task import StageTask
from tidemark.chassis.logs import get_logger
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId, TopicPartition

log = get_logger(__name__)
IDLE_CLEANUP_EVERY_S = 1.0  # ticks without a batch clean TTL state at most this often
CONTROL_IN_BATCH_S = 0.1  # inside a batch, the control plane is looked at this often
# A source stage's periodic trigger that comes before the attempt processed its first records waits
# for them (the end of the first batch), at most this long after the attempt began running: the
# coordinator triggers a new attempt's first checkpoint at once, so that the first results are
# committed right after the first batch, not one interval later (a checkpoint of nothing first).
FIRST_RECORDS_WAIT_S = 3.0


@dataclass(eq=False)
class StageRunner:
    """One wired and restored attempt of a stage worker (see the module)."""

    job: JobId
    stage: Stage
    attempt: Attempt
    tasks: Sequence[StageTask]
    input: SourceInput | ChannelInput
    output: StageOutput
    control: ControlPlane
    clock: StageClock
    checkpointer: StageCheckpointer
    failures: RecordFailures
    lag: ConsumerLag
    positions: dict[TopicPartition, int]
    """The input positions: after the last record read of each partition (shared with the input)."""
    read_partitions: Sequence[TopicPartition]
    restored_from: CheckpointMetadata | None
    local_dir: Path
    """The attempt's local state files (RocksDB), removed on close."""
    lock: threading.RLock = field(default_factory=threading.RLock)
    stopping: CheckpointId | None = None
    finished: bool = False
    abandoned: bool = False  # the supervisor released the attempt (runtime.worker.process)
    closed: bool = False
    processing: bool = False  # set when the first records a task processed are counted (flush_outputs)
    _cleaned_at: float = 0.0  # the last incremental TTL cleanup (time.monotonic)
    _controlled_at: float = 0.0  # the last look at the control plane (time.monotonic)
    _deferred: list[CheckpointTrigger] = field(default_factory=list)  # triggers kept for later
    _began: float = 0.0  # when the attempt began running (time.monotonic)

    def __post_init__(self) -> None:
        self._batch_seconds = BATCH_DURATION.labels(self.job, self.stage.name)
        self._began = time.monotonic()

    @property
    def epoch(self) -> Epoch:
        return self.attempt.epoch

    # ------------------------------------------------------------------ records

    def on_batch(self, records: Iterable[InputRecord], ends: Mapping[TopicPartition, int] | None = None,
                 ends_after: Callable[[int], Mapping[TopicPartition, int]] | None = None) -> None:
        """One micro-batch, then the control plane (called under ``lock``), timed in
        ``tidemark_worker_batch_duration_seconds`` (after any wait for a stop-with-savepoint);
        ``ends``: its end offsets per partition, when known; ``ends_after``: those after its
        first ``n`` records, where a checkpoint may cut it (see :meth:`SourceInput.feed`)."""
        if self.finished:
            return
        self.wait_while_stopping()
        started = time.monotonic()
        self._process_batch(records, ends, ends_after)
        self._batch_seconds.observe(time.monotonic() - started)

    def on_local(self, records: Iterable[InputRecord]) -> None:
        """Records of the fused worker's local channel (called under ``lock``, on the processing
        thread: :mod:`tidemark.runtime.worker.local_channel`): as a batch, not timed as one."""
        if self.finished:
            return
        self.wait_while_stopping()
        self._process_batch(records, None)

    def _process_batch(self, records: Iterable[InputRecord], ends: Mapping[TopicPartition, int] | None,
                       ends_after: Callable[[int], Mapping[TopicPartition, int]] | None = None) -> None:
        self.input.feed(records, self, ends, ends_after)
        if self.finished:  # a stop-with-savepoint completed while aligning
            return
        self.clean_up_expired()
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
        self.input.tick()
        if time.monotonic() - self._cleaned_at >= IDLE_CLEANUP_EVERY_S:
            self.clean_up_expired()
        self.flush_outputs()
        self.handle_control()

    def clean_up_expired(self) -> None:
        """Each task's incremental TTL cleanup (:meth:`StageTask.clean_up_expired`): after every
        batch, and on ticks at most every ``IDLE_CLEANUP_EVERY_S`` (an idle stage ticks ten
        times a second)."""
        self._cleaned_at = time.monotonic()
        for task in self.tasks:
            task.clean_up_expired()

    def flush_outputs(self) -> None:
        """Hand what the tasks' operators emitted so far and the watermark, if news, to the
        output; count what the tasks read and the timers did meanwhile. The first records an
        attempt processed are noticed here, where every count passes (also those of a batch whose
        barrier completed an alignment, flushed before its checkpoint)."""
        batch = {}
        for task in self.tasks:
            read, task.records_in = task.records_in, 0
            if read:
                RECORDS_IN.labels(self.job, task.task_id).inc(read)
                if not self.processing:
                    self._first_records_processed()
            if task.output:
                batch[task.task_id] = task.take_output()
        clock = self.clock
        clock.count_timers()
        watermark = clock.to_emit()
        if not batch and watermark is None:
            return
        self.output.write(batch, watermark)
        if watermark is not None:
            clock.emitted(watermark)
        for task_id, records in batch.items():
            RECORDS_OUT.labels(self.job, task_id).inc(len(records))

    def _first_records_processed(self) -> None:
        self.processing = True  # the moment a recovery ends (bench/bench_recovery.py)
        log.info("first records processed", job=self.job, stage=self.stage.name, epoch=self.epoch)
        self.attempt.processing_file.touch()

    # ------------------------------------------------------------------ checkpoints

    def within_batch(self, cut: Callable[[], None] | None = None) -> None:
        """Called by the input every few thousand records of a batch: at most every
        ``CONTROL_IN_BATCH_S``, the control plane (a completed checkpoint's output committed now,
        not after the batch). ``cut``: a source stage may checkpoint here, once ``cut()`` moved
        its positions to the records processed so far (:meth:`SourceInput.feed`); else a
        trigger waits for the batch's end."""
        if time.monotonic() - self._controlled_at >= CONTROL_IN_BATCH_S:
            self.handle_control(within_batch=True, cut=cut)

    def handle_control(self, within_batch: bool = False, cut: Callable[[], None] | None = None) -> None:
        """Act on new notifications of this attempt (called under ``lock``); first, raise what
        failed in the asynchronous part of a checkpoint (other than a declined write), then take
        the triggers kept before (at a batch's end, or where a batch may be cut: the triggers
        kept inside a batch, or before the first records: see ``FIRST_RECORDS_WAIT_S``). Live
        state queries of keys this worker owns are answered after the other notifications,
        together."""
        self._controlled_at = time.monotonic()
        self.checkpointer.thread.raise_failure()
        notes = self.control.poll()
        if (not within_batch or cut is not None) and self._deferred:
            notes, self._deferred = [*self._deferred, *notes], []
        answers: list[StateAnswer] = []
        holding = False  # a trigger kept: those after it too (checkpoints are taken in id order)
        for note in notes:
            if isinstance(note, StateQuery):
                try:
                    reply = answer(note, self.stage.name, self.tasks, self.epoch)
                except Exception:  # a query never fails the job; unanswered, the coordinator says so
                    log.exception("live state query failed", job=self.job, stage=self.stage.name,
                                  state=note.state_name, request_id=note.request_id)
                    continue
                if reply is not None:
                    answers.append(reply)
                continue
            if isinstance(note, MaterializationEvent):
                for task in self.tasks:
                    task.on_materialization(note)
                continue
            if note.epoch != self.epoch:
                continue
            if isinstance(note, CheckpointTrigger):
                if holding or self._kept(note, within_batch, cut):
                    self._deferred.append(note)
                    holding = True
                elif self.input.takes_triggers and not self.finished and self.stopping is None:
                    if cut is not None:
                        cut()
                    self.checkpoint(note.checkpoint_id, note.checkpoint_type, None, note.target_location)
            elif isinstance(note, CheckpointCompleted):
                self._completed(note.checkpoint_id)
            elif isinstance(note, CheckpointAborted):
                self.output.abort(note.checkpoint_id)
                for task in self.tasks:
                    task.notify_aborted(note.checkpoint_id)
                if note.checkpoint_id == self.stopping:
                    log.warning("stop-with-savepoint aborted; resuming", job=self.job, reason=note.reason)
                    self.stopping = None
        if answers:
            self.control.answer(answers)

    def _kept(self, trigger: CheckpointTrigger, within_batch: bool, cut: Callable[[], None] | None) -> bool:
        """Whether ``trigger`` waits: inside a batch that cannot be cut there, or a
        stop-with-savepoint (after its snapshot nothing is processed: the batch ends first), or
        a source stage's periodic trigger before its first records (a batch being cut has them;
        a channel stage takes no triggers: it drops them at once)."""
        if within_batch:
            return cut is None or trigger.checkpoint_type is CheckpointType.STOP_WITH_SAVEPOINT
        return (self.input.takes_triggers and trigger.checkpoint_type is CheckpointType.CHECKPOINT
                and not self.processing and time.monotonic() - self._began < FIRST_RECORDS_WAIT_S)

    def _completed(self, checkpoint_id: CheckpointId) -> None:
        self.output.commit(checkpoint_id)
        for number, task in enumerate(self.tasks, start=1):
            task.notify_completed(checkpoint_id)
            if number == 1 < len(self.tasks):
                FAULTS.hit("during-notification")  # e.g. a sink's commit made for one task only
        FAULTS.hit("after-notification")
        if checkpoint_id == self.stopping:
            self.finished = True
            for task in self.tasks:
                task.finish()
            log.info("stop-with-savepoint completed; finishing", job=self.job, stage=self.stage.name,
                     savepoint=checkpoint_id)

    def wait_while_stopping(self) -> None:
        """After a stop-with-savepoint snapshot: process nothing until it completes or aborts (or
        the attempt is abandoned)."""
        while self.stopping is not None and not self.finished and not self.abandoned:
            self.handle_control()
            time.sleep(0.05)

    def checkpoint(self, checkpoint_id: CheckpointId, kind: CheckpointType, aligned: Aligned | None,
                   target: str | None = None) -> None:
        for task in self.tasks:  # what they emit now goes before the barrier
            task.prepare_snapshot_pre_barrier(checkpoint_id)
        self.flush_outputs()
        taken = self.checkpointer.checkpoint(checkpoint_id, kind, self.positions, aligned, target,
                                             self.clock.snapshot_item(checkpoint_id))
        if taken and kind is CheckpointType.STOP_WITH_SAVEPOINT:
            self.stopping = checkpoint_id
            self.wait_while_stopping()

    def decline(self, checkpoint_id: CheckpointId, reason: str) -> None:
        """Decline a checkpoint for every task (an alignment overtaken by a newer barrier)."""
        for task in self.tasks:
            self.control.decline(checkpoint_id, task.task_id, reason, self.epoch)

    # ------------------------------------------------------------------ monitoring and the end

    def report_lag(self) -> None:
        self.lag.report(self.positions, self.read_partitions)
        self.clock.report_lag()

    def abandon(self) -> None:
        """The attempt is over (released): a batch waiting on the control plane stops waiting."""
        self.abandoned = True

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.checkpointer.thread.close(wait=not self.abandoned)  # a finished attempt acked everything it took
        for task in self.tasks:
            task.close()
        self.output.close()
        self.control.close()
        self.failures.close()
        self.clock.close()
        self.lag.metadata.close()
        shutil.rmtree(self.local_dir, ignore_errors=True)
