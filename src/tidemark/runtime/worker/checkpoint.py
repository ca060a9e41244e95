"""Taking one checkpoint of a stage at a worker (Flink's synchronous part of a snapshot).

In this order: pre-commit the output (a channel writes a barrier per task into every partition;
the exactly-once sink seals its write-ahead buffer), snapshot each task's keyed and operator state
into checkpoint storage (``<job>/chk-<id>/``, savepoints in their own folder and canonical
format, RocksDB's shared files under ``<job>/shared/``), then ack every task to the coordinator
with its handles, its share of the source positions and its timings. A savepoint that cannot
be written to its target is declined instead (it fails with the reason; the worker runs on).
A source stage's positions are the offsets after the last processed record; a channel stage's
are its aligned cut.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidemark.checkpoint_store.catalog import check_savepoint_target
from tidemark.checkpoint_store.layout import checkpoint_dir, shared_dir
from tidemark.clock import now_ms
from tidemark.protocol.messages import Barrier, SourceOffset, TaskAck, TaskSnapshot, TaskTimings
from tidemark.runtime.worker.alignment import Aligned
from tidemark.runtime.job.control import ControlPlane
from tidemark.runtime.job.faults import FAULTS
from tidemark.runtime.job.metrics import ALIGNMENT, SNAPSHOT_ASYNC, SNAPSHOT_SYNC, record_state_sizes
from tidemark.runtime.worker.outputs import StageOutput
from tidemark.runtime.job.operator_states import CUT_STATE, SINK_STATE, WATERMARK_STATE
from tidemark.runtime.worker.task import StageTask
from tidemark.chassis.logs import get_logger
from tidemark.storage.base import CheckpointStorage, InvalidStoragePath, StorageError
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, CheckpointType, CheckpointingMode, Epoch, JobId, OperatorId, TaskId, TopicPartition

log = get_logger(__name__)


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

    def checkpoint(self, checkpoint_id: CheckpointId, kind: CheckpointType, positions: Mapping[TopicPartition, int],
                   aligned: Aligned | None, target: str | None = None, watermarks: bytes | None = None) -> bool:
        """Take the checkpoint and ack it; False when it was declined instead: a savepoint with a
        ``target`` the storage's check refuses (before anything is written) or that fails to be
        written there, which fails that savepoint with the reason and leaves the worker running.
        ``positions``: the source stage's positions (ignored when ``aligned`` gives the cut);
        ``target``: where a savepoint goes (else the checkpoint's own folder); ``watermarks``:
        the worker's, as of the checkpoint (runtime.worker.watermarks)."""
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
            snapshots = self._snapshot(checkpoint_id, kind, storage, items,
                                       aligned.resume_offsets() if aligned is not None else dict(positions), aligned,
                                       [watermarks] if watermarks is not None else [])
        except (StorageError, OSError) as exc:
            if target is None:
                raise
            self._decline(checkpoint_id, self._target_failure(target, exc))
            return False
        sync_s = time.monotonic() - started
        FAULTS.hit("after-snapshot")
        alignment_ms = aligned.alignment_ms if aligned is not None else 0
        acked = time.monotonic()
        for snapshot in snapshots:
            timings = TaskTimings(alignment_ms=alignment_ms, sync_ms=int(sync_s * 1000), async_ms=0, processed_bytes=0)
            self.control.ack(TaskAck(self.job, checkpoint_id, snapshot, timings, now_ms(), self.epoch))
        SNAPSHOT_SYNC.labels(self.job).observe(sync_s)
        SNAPSHOT_ASYNC.labels(self.job).observe(time.monotonic() - acked)
        ALIGNMENT.labels(self.job).observe(alignment_ms / 1000)
        record_state_sizes(self.job, self.stage, (task.backend.size() for task in self.tasks))
        log.info("checkpoint acked", job=self.job, stage=self.stage, checkpoint=checkpoint_id, kind=kind.value,
                 sync_ms=int(sync_s * 1000), alignment_ms=alignment_ms, held=aligned.held if aligned else 0,
                 overtaken=aligned.overtaken if aligned else 0)
        FAULTS.hit("after-ack")
        return True

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
                  aligned: Aligned | None, watermark_items: list[bytes]) -> list[TaskSnapshot]:
        """Each task's state; the worker's channel cut and watermarks go with its first task (union
        state: every task sees them after a restore), its source partitions are dealt round-robin
        to its tasks."""
        cut_items = [json.dumps({"topic": t, "partition": p, "task": task, "offset": o}).encode()
                     for (t, p, task), o in sorted(aligned.cut.items())] if aligned is not None else []
        ordered = sorted(positions.items())
        snapshots = []
        for position, task in enumerate(self.tasks):
            index = task.assignment.subtask_index
            keyed, operator = task.snapshot(checkpoint_id, storage, canonical=kind.is_savepoint, operator_items={
                SINK_STATE: sink_items.get(task.task_id, []), CUT_STATE: cut_items if position == 0 else [],
                WATERMARK_STATE: watermark_items if position == 0 else []})
            offsets = tuple(SourceOffset(t, p, o) for (t, p), o in ordered[position::len(self.tasks)])
            snapshots.append(TaskSnapshot(
                task.task_id, self.operator_id, index, task.assignment.key_group_start,
                task.assignment.key_group_end, state_handles=keyed.handles + operator, source_offsets=offsets,
                changelog_ranges=keyed.ranges, materialization=keyed.materialization))
        return snapshots
