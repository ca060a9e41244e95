"""Taking one checkpoint of a stage at a worker, in Flink's two parts.

The synchronous part, on the processing thread, which processes nothing meanwhile: pre-commit
the output (a channel writes a barrier per task into every partition; the exactly-once sink seals
its write-ahead buffer), then capture each task's keyed and operator state (heap tables and
RocksDB databases copy-on-write, operator state serialized; in changelog mode the changes
streamed so far made durable). The asynchronous part, on the stage's snapshot thread
(:class:`SnapshotThread`) while records keep flowing: write what was captured into checkpoint
storage (``<job>/chk-<id>/``, savepoints in their own folder and canonical format, RocksDB's
shared files under ``<job>/shared/``), then ack every task to the coordinator with its handles,
its share of the source positions and the durations of both parts. A savepoint target the
storage refuses, or a state write that fails, declines the checkpoint instead (it fails with the
reason; the worker runs on). A source stage's positions are the offsets after the last processed
record; a channel stage's are its aligned cut.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from tidemark.checkpoint_store.catalog import check_savepoint_target
from tidemark.checkpoint_store.layout import checkpoint_dir, shared_dir
from tidemark.clock import now_ms
from tidemark.protocol.messages import Barrier, SourceOffset, StateHandle, TaskAck, TaskSnapshot, TaskTimings
from tidemark.runtime.worker.alignment import Aligned
from tidemark.runtime.job.control import ControlPlane
from tidemark.runtime.job.faults import FAULTS, enter_lane
from tidemark.runtime.job.metrics import ALIGNMENT, SNAPSHOT_ASYNC, SNAPSHOT_SYNC, record_state_sizes
from tidemark.runtime.worker.outputs import StageOutput
from tidemark.runtime.job.operator_states import CUT_STATE, SINK_STATE, WATERMARK_STATE
from tidemark.runtime.worker.task import StageTask
from tidemark.state.backend import KeyedSnapshot
from tidemark.chassis.logs import get_logger
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.storage.base import CheckpointStorage, InvalidStoragePath, StorageError
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, CheckpointType, CheckpointingMode, Epoch, JobId, OperatorId, TaskId, TopicPartition

log = get_logger(__name__)

# While an asynchronous part runs, the interpreter lock changes hands this often (Python's default:
# every 5 ms). The part releases the lock for each file operation and wants it back after: with the
# default, each time it waited for the processing thread's next 5 ms, so the first checkpoint of a
# job with a backlog (4 RocksDB tasks, a few files each) took 0.9-1.6 s beside a busy batch, 35 ms
# alone; at 0.2 ms about 0.1 s (measured with a pure-Python processing loop).
SNAPSHOT_SWITCH_INTERVAL_S = 0.0002
_switching = threading.Lock()
_parts_running = 0
_default_switch_interval = sys.getswitchinterval()


@contextmanager
def _short_switch_interval() -> Iterator[None]:
    """:data:`SNAPSHOT_SWITCH_INTERVAL_S` while any stage of this process runs an asynchronous part."""
    global _parts_running, _default_switch_interval
    with _switching:
        if _parts_running == 0:
            _default_switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(SNAPSHOT_SWITCH_INTERVAL_S)
        _parts_running += 1
    try:
        yield
    finally:
        with _switching:
            _parts_running -= 1
            if _parts_running == 0:
                sys.setswitchinterval(_default_switch_interval)


class SnapshotThread:
    """A stage's one thread for the asynchronous parts of its checkpoints, run in the order taken
    (a RocksDB upload starts from the files the previous one uploaded). A failure of one that is
    not a declined checkpoint (an ack not delivered, a value the serializer refuses) is kept and
    raised on the processing thread by :meth:`raise_failure`, as it would have been there."""

    def __init__(self, name: str) -> None:
        # its fault points count for the stage's lane (runtime.job.faults: a process may run two)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"snapshots-{name}", initializer=enter_lane,
                                            initargs=(name,))
        self._failure: BaseException | None = None
        self._closed = False

    def submit(self, work: Callable[[], None]) -> None:
        self._executor.submit(self._run, work)

    def _run(self, work: Callable[[], None]) -> None:
        try:
            with _short_switch_interval():
                work()
        except BaseException as exc:  # noqa: BLE001 - handed to the processing thread
            if self._closed:  # no processing thread to raise it on any more
                log.warning("an asynchronous snapshot part failed as the attempt ended",
                            error=f"{type(exc).__name__}: {exc}")
            elif self._failure is None:
                self._failure = exc

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def close(self, *, wait: bool) -> None:
        """No more parts; ``wait`` for those submitted, else drop those not started (the attempt
        was abandoned: its checkpoints will not complete)."""
        self._closed = True
        self._executor.shutdown(wait=wait, cancel_futures=not wait)


_TaskPart = tuple[StageTask, AsyncSnapshot[tuple[KeyedSnapshot, tuple[StateHandle, ...]]], tuple[SourceOffset, ...]]


@dataclass(frozen=True)
class _Taken:
    """What the synchronous part of a checkpoint leaves to its asynchronous part."""

    checkpoint_id: CheckpointId
    kind: CheckpointType
    target: str | None
    parts: list[_TaskPart]
    sync_s: float
    aligned: Aligned | None


@dataclass(frozen=True)
class StageCheckpointer:
    """Everything of a stage a checkpoint touches, fixed for the attempt."""

    job: JobId
    stage: str
    operator_id: OperatorId
    mode: CheckpointingMode
    epoch: Epoch
    tasks: Sequence[StageTask]
    output: StageOutput
    storage: CheckpointStorage
    control: ControlPlane
    thread: SnapshotThread

    def checkpoint(self, checkpoint_id: CheckpointId, kind: CheckpointType, positions: Mapping[TopicPartition, int],
                   aligned: Aligned | None, target: str | None = None, watermarks: bytes | None = None) -> bool:
        """Take the checkpoint's synchronous part and hand its asynchronous part (the state
        written, then the acks) to :attr:`thread`; False when it was declined at once instead: a
        savepoint with a ``target`` the storage's check refuses (nothing is written). A target
        or state write that fails later declines it from the thread (the savepoint fails with
        the reason; the worker runs on). ``positions``: the source stage's positions (ignored
        when ``aligned`` gives the cut); ``target``: where a savepoint goes (else the
        checkpoint's own folder); ``watermarks``: the worker's, as of the checkpoint
        (runtime.worker.watermarks)."""
        started = time.monotonic()
        emitted = now_ms()
        barriers = {t.task_id: Barrier(self.job, checkpoint_id, kind, self.mode, t.task_id, emitted, self.epoch)
                    for t in self.tasks}
        storage = SnapshotStorage(self.storage, target or checkpoint_dir(self.job, checkpoint_id, kind),
                                  shared_dir(self.job))
        try:
            if target is not None:
                check_savepoint_target(self.storage, self.job, target)
            items = self.output.pre_commit(barriers)
            parts = self._snapshot(checkpoint_id, kind, storage, items,
                                   aligned.resume_offsets() if aligned is not None else dict(positions), aligned,
                                   [watermarks] if watermarks is not None else [])
        except (StorageError, OSError) as exc:
            if target is None:
                raise
            self._decline(checkpoint_id, self._target_failure(target, exc))
            return False
        record_state_sizes(self.job, self.stage, (task.backend.size() for task in self.tasks))
        taken = _Taken(checkpoint_id, kind, target, parts, time.monotonic() - started, aligned)
        self.thread.submit(lambda: self._write_and_ack(taken))
        return True

    def _write_and_ack(self, taken: _Taken) -> None:
        """The asynchronous part: each task's state written, then every task acked (or the
        checkpoint declined when a write failed)."""
        started = time.monotonic()
        checkpoint_id = taken.checkpoint_id
        try:
            snapshots = [self._task_snapshot(task, part.run(), offsets) for task, part, offsets in taken.parts]
        except (StorageError, OSError) as exc:
            reason = (self._target_failure(taken.target, exc) if taken.target is not None
                      else f"state not written to checkpoint storage: {type(exc).__name__}: {exc}")
            self._decline(checkpoint_id, reason)
            return
        finally:
            for _, part, _ in taken.parts:
                part.release()
        async_s = time.monotonic() - started
        FAULTS.hit("after-snapshot")
        aligned = taken.aligned
        alignment_ms = aligned.alignment_ms if aligned is not None else 0
        timings = TaskTimings(alignment_ms=alignment_ms, sync_ms=int(taken.sync_s * 1000),
                              async_ms=int(async_s * 1000), processed_bytes=0)
        for snapshot in snapshots:
            self.control.ack(TaskAck(self.job, checkpoint_id, snapshot, timings, now_ms(), self.epoch))
        SNAPSHOT_SYNC.labels(self.job).observe(taken.sync_s)
        SNAPSHOT_ASYNC.labels(self.job).observe(async_s)
        ALIGNMENT.labels(self.job).observe(alignment_ms / 1000)
        log.info("checkpoint acked", job=self.job, stage=self.stage, checkpoint=checkpoint_id, kind=taken.kind.value,
                 sync_ms=timings.sync_ms, async_ms=timings.async_ms, alignment_ms=alignment_ms,
                 held=aligned.held if aligned else 0, overtaken=aligned.overtaken if aligned else 0)
        FAULTS.hit("after-ack")

    def _target_failure(self, target: str, error: Exception) -> str:
        """Why the savepoint could not be written to ``target``: what the storage's check refuses
        there now, else the write's own error (e.g. a file inside the target where a task's
        folder goes)."""
        try:
            check_savepoint_target(self.storage, self.job, target)
        except InvalidStoragePath as refused:  # TargetConflict too
            return f"savepoint target refused: {refused}"
        except (StorageError, OSError):  # storage unreachable now: the write's error says enough
            pass
        return f"savepoint not written to target {target!r}: {type(error).__name__}: {error}"

    def _decline(self, checkpoint_id: CheckpointId, reason: str) -> None:
        """Decline the checkpoint for every task: the coordinator aborts it (DECLINED, reason)."""
        for task in self.tasks:
            self.control.decline(checkpoint_id, task.task_id, reason, self.epoch)
        log.warning("checkpoint declined", job=self.job, stage=self.stage, checkpoint=checkpoint_id, reason=reason)

    def _snapshot(self, checkpoint_id: CheckpointId, kind: CheckpointType, storage: SnapshotStorage,
                  sink_items: Mapping[TaskId, list[bytes]], positions: Mapping[TopicPartition, int],
                  aligned: Aligned | None, watermark_items: list[bytes]) -> list[_TaskPart]:
        """The synchronous part of each task's snapshot, with its source offsets; the worker's
        channel cut and watermarks go with its first task (union state: every task sees them
        after a restore), its source partitions are dealt round-robin to its tasks."""
        cut_items = [json.dumps({"topic": t, "partition": p, "task": task, "offset": o}).encode()
                     for (t, p, task), o in sorted(aligned.cut.items())] if aligned is not None else []
        ordered = sorted(positions.items())
        parts: list[_TaskPart] = []
        try:
            for position, task in enumerate(self.tasks):
                part = task.snapshot(checkpoint_id, storage, canonical=kind.is_savepoint, operator_items={
                    SINK_STATE: sink_items.get(task.task_id, []), CUT_STATE: cut_items if position == 0 else [],
                    WATERMARK_STATE: watermark_items if position == 0 else []})
                parts.append((task, part, tuple(SourceOffset(t, p, o) for (t, p), o in ordered[position::len(self.tasks)])))
        except BaseException:
            for _, part, _ in parts:
                part.release()
            raise
        return parts

    def _task_snapshot(self, task: StageTask, written: tuple[KeyedSnapshot, tuple[StateHandle, ...]],
                       offsets: tuple[SourceOffset, ...]) -> TaskSnapshot:
        keyed, operator = written
        return TaskSnapshot(task.task_id, self.operator_id, task.assignment.subtask_index,
                            task.assignment.key_group_start, task.assignment.key_group_end,
                            state_handles=keyed.handles + operator, source_offsets=offsets,
                            changelog_ranges=keyed.ranges, materialization=keyed.materialization)
