"""Checkpoint statistics (Flink: CheckpointStatsTracker), as plain data.

Lifecycle: one per coordinator, fed by the coordinator's state transitions (triggered, task
acked, completed, aborted, restored) with the timestamps carried by the records, so replaying
the same records rebuilds the same statistics. ``snapshot`` returns an immutable view the
service turns into Prometheus metrics and the HTTP API into JSON.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from tidemark.protocol.messages import CheckpointMetadata, TaskTimings
from tidemark.types import CheckpointId, CheckpointType, TaskId


class CheckpointStatus(str, enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class CheckpointStatsEntry:
    """One checkpoint in the history."""

    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    status: CheckpointStatus
    triggered_at: int
    num_tasks: int
    num_acknowledged: int = 0
    ended_at: int | None = None
    checkpointed_size_bytes: int = 0
    state_size_bytes: int = 0
    failure_reason: str | None = None
    metadata_path: str | None = None
    task_timings: tuple[tuple[TaskId, TaskTimings], ...] = ()

    @property
    def duration_ms(self) -> int | None:
        return None if self.ended_at is None else self.ended_at - self.triggered_at


@dataclass(frozen=True, slots=True)
class CheckpointCounts:
    triggered: int = 0
    in_progress: int = 0
    completed: int = 0
    failed: int = 0
    restored: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointStatsSnapshot:
    """Everything the tracker knows, at one point of the record stream."""

    counts: CheckpointCounts
    last_completed: CheckpointStatsEntry | None
    last_failed: CheckpointStatsEntry | None
    last_restore_at: int | None
    last_restored_checkpoint_id: CheckpointId | None
    history: tuple[CheckpointStatsEntry, ...] = field(default=())
    last_savepoint: CheckpointStatsEntry | None = None  # the newest completed savepoint, kept past the history

    @property
    def last_completed_id(self) -> CheckpointId | None:
        return None if self.last_completed is None else self.last_completed.checkpoint_id

    @property
    def last_completed_at(self) -> int | None:
        return None if self.last_completed is None else self.last_completed.ended_at

    @property
    def last_duration_ms(self) -> int | None:
        return None if self.last_completed is None else self.last_completed.duration_ms

    @property
    def last_checkpointed_size_bytes(self) -> int | None:
        entry = self.last_completed
        return None if entry is None else entry.checkpointed_size_bytes

    @property
    def last_full_size_bytes(self) -> int | None:
        return None if self.last_completed is None else self.last_completed.state_size_bytes

    def time_since_last_completed_ms(self, now_ms: int) -> int | None:
        at = self.last_completed_at
        return None if at is None else max(0, now_ms - at)


class CheckpointStatsTracker:
    """Counts and a bounded history of the last ``history_size`` checkpoints."""

    def __init__(self, history_size: int = 20) -> None:
        if history_size < 1:
            raise ValueError(f"history_size must be >= 1, got {history_size}")
        self.history_size = history_size
        self._history: OrderedDict[CheckpointId, CheckpointStatsEntry] = OrderedDict()
        self._counts = CheckpointCounts()
        self._last_completed: CheckpointStatsEntry | None = None
        self._last_savepoint: CheckpointStatsEntry | None = None
        self._last_failed: CheckpointStatsEntry | None = None
        self._last_restore_at: int | None = None
        self._last_restored_id: CheckpointId | None = None
        self._open: set[CheckpointId] = set()

    def report_triggered(
        self, checkpoint_id: CheckpointId, kind: CheckpointType, triggered_at: int, num_tasks: int
    ) -> None:
        entry = CheckpointStatsEntry(
            checkpoint_id, kind, CheckpointStatus.IN_PROGRESS, triggered_at, num_tasks
        )
        self._history[checkpoint_id] = entry
        while len(self._history) > self.history_size:
            self._history.popitem(last=False)
        self._open.add(checkpoint_id)
        self._counts = replace(self._counts, triggered=self._counts.triggered + 1)

    def report_task_ack(
        self, checkpoint_id: CheckpointId, task: TaskId, timings: TaskTimings
    ) -> None:
        entry = self._history.get(checkpoint_id)
        if entry is None or entry.status is not CheckpointStatus.IN_PROGRESS:
            return
        self._history[checkpoint_id] = replace(
            entry,
            num_acknowledged=entry.num_acknowledged + 1,
            task_timings=tuple(sorted((*entry.task_timings, (task, timings)))),
        )

    def report_completed(
        self, metadata: CheckpointMetadata, completed_at: int, metadata_path: str
    ) -> None:
        entry = self._history.get(metadata.checkpoint_id) or self._untracked(metadata)
        done = replace(
            entry,
            status=CheckpointStatus.COMPLETED,
            ended_at=completed_at,
            checkpointed_size_bytes=metadata.checkpointed_size_bytes,
            state_size_bytes=metadata.state_size_bytes,
            metadata_path=metadata_path,
        )
        self._finish(entry, done)
        self._last_completed = done
        if done.checkpoint_type.is_savepoint:
            self._last_savepoint = done
        self._counts = replace(self._counts, completed=self._counts.completed + 1)

    def report_failed(
        self, checkpoint_id: CheckpointId, kind: CheckpointType, triggered_at: int,
        failed_at: int, reason: str,
    ) -> None:
        entry = self._history.get(checkpoint_id) or CheckpointStatsEntry(
            checkpoint_id, kind, CheckpointStatus.IN_PROGRESS, triggered_at, 0
        )
        failed = replace(
            entry, status=CheckpointStatus.FAILED, ended_at=failed_at, failure_reason=reason
        )
        self._finish(entry, failed)
        self._last_failed = failed
        self._counts = replace(self._counts, failed=self._counts.failed + 1)

    def report_discarded(self, checkpoint_id: CheckpointId) -> None:
        """A retained checkpoint or savepoint left storage: the last savepoint, if it was that one,
        is no more (an older one the history still names is not brought back)."""
        if self._last_savepoint is not None and self._last_savepoint.checkpoint_id == checkpoint_id:
            self._last_savepoint = None

    def report_restored(self, checkpoint_id: CheckpointId, restored_at: int) -> None:
        self._last_restore_at = restored_at
        self._last_restored_id = checkpoint_id
        self._counts = replace(self._counts, restored=self._counts.restored + 1)

    def snapshot(self) -> CheckpointStatsSnapshot:
        return CheckpointStatsSnapshot(
            counts=replace(self._counts, in_progress=len(self._open)),
            last_completed=self._last_completed,
            last_failed=self._last_failed,
            last_restore_at=self._last_restore_at,
            last_restored_checkpoint_id=self._last_restored_id,
            history=tuple(self._history.values()),
            last_savepoint=self._last_savepoint,
        )

    def _untracked(self, metadata: CheckpointMetadata) -> CheckpointStatsEntry:
        return CheckpointStatsEntry(
            metadata.checkpoint_id, metadata.checkpoint_type, CheckpointStatus.IN_PROGRESS,
            metadata.triggered_at, len(metadata.tasks), len(metadata.tasks),
        )

    def _finish(self, before: CheckpointStatsEntry, after: CheckpointStatsEntry) -> None:
        self._open.discard(before.checkpoint_id)
        if after.checkpoint_id in self._history:
            self._history[after.checkpoint_id] = after
