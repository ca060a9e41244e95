"""What the materializer knows, folded from its topics: each task's newest completed checkpoint
and the materializations already made.

Pure. Lifecycle: one :class:`MaterializerLedger` per service; ``apply`` every record of the
control (``JobRegistration``), checkpoint-events (``CheckpointMetadata``: a completed, durable
checkpoint) and materializations (``MaterializationEvent``) topics; ``candidates()`` then lists
the task checkpoints worth materializing. Only completed checkpoints (type CHECKPOINT) of a
job's current attempt are candidates: the workers of that attempt are the only ones that can
use a materialization (they accept one only for a checkpoint they took).
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.changelog.source import ChangelogSource
from tidemark.protocol.messages import (
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskSnapshot,
)
from tidemark.keygroups import KeyGroupRange
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId, MaterializationId, TaskId

TaskKey = tuple[JobId, TaskId]


@dataclass(frozen=True, slots=True)
class TaskCheckpoint:
    """One task's part of a completed checkpoint: the state a materialization folds up to."""

    job_id: JobId
    checkpoint_id: CheckpointId
    epoch: Epoch
    max_parallelism: int
    task: TaskSnapshot

    @property
    def key(self) -> TaskKey:
        return (self.job_id, self.task.task_id)

    @property
    def key_groups(self) -> KeyGroupRange:
        return KeyGroupRange(self.task.key_group_start, self.task.key_group_end)

    @property
    def topic(self) -> str | None:
        """The operator's changelog topic (``None`` without ranges)."""
        return self.task.changelog_ranges[0].topic if self.task.changelog_ranges else None

    def source(self) -> ChangelogSource:
        """What restoring this checkpoint reads for this task."""
        return ChangelogSource.from_task_snapshot(self.task)


@dataclass(frozen=True, slots=True)
class LastMaterialization:
    materialization_id: MaterializationId
    checkpoint_id: CheckpointId
    at: int


class MaterializerLedger:
    """Per task: the newest completed checkpoint, the newest materialization, ids used."""

    def __init__(self) -> None:
        self.registrations: dict[JobId, JobRegistration] = {}
        self.newest: dict[TaskKey, TaskCheckpoint] = {}
        self.materialized: dict[TaskKey, LastMaterialization] = {}
        self._max_id: dict[TaskKey, int] = {}

    def apply(self, message: object) -> None:
        if isinstance(message, JobRegistration):
            known = self.registrations.get(message.job_id)
            if known is None or known.epoch <= message.epoch:
                self.registrations[message.job_id] = message
        elif isinstance(message, CheckpointMetadata):
            self._completed(message)
        elif isinstance(message, MaterializationEvent):
            self._materialization(message)

    def _completed(self, metadata: CheckpointMetadata) -> None:
        if metadata.checkpoint_type is not CheckpointType.CHECKPOINT:
            return  # savepoints are not in the workers' materialization path
        for task in metadata.tasks:
            if not task.changelog_ranges and task.materialization is None:
                continue  # not in changelog mode
            candidate = TaskCheckpoint(metadata.job_id, metadata.checkpoint_id, metadata.epoch,
                                       metadata.max_parallelism, task)
            known = self.newest.get(candidate.key)
            if known is None or known.checkpoint_id < candidate.checkpoint_id:
                self.newest[candidate.key] = candidate

    def _materialization(self, event: MaterializationEvent) -> None:
        key = (event.job_id, event.task_id)
        self._max_id[key] = max(self._max_id.get(key, 0), event.materialization_id)
        if event.status is not MaterializationStatus.COMPLETED:
            return
        known = self.materialized.get(key)
        if known is None or known.checkpoint_id <= event.checkpoint_id:
            self.materialized[key] = LastMaterialization(event.materialization_id,
                                                         event.checkpoint_id, event.at)

    def _current_attempt(self, checkpoint: TaskCheckpoint) -> bool:
        registration = self.registrations.get(checkpoint.job_id)
        if registration is None:
            return True  # registered before the topics were kept: trust the checkpoint
        return registration.epoch == checkpoint.epoch and not registration.finished

    def candidates(self) -> list[TaskCheckpoint]:
        """Task checkpoints with changelog ranges, newer than the task's last materialization,
        of the job's current attempt, by job and task."""
        found = []
        for key in sorted(self.newest):
            checkpoint = self.newest[key]
            last = self.materialized.get(key)
            if last is not None and last.checkpoint_id >= checkpoint.checkpoint_id:
                continue
            if checkpoint.task.changelog_ranges and self._current_attempt(checkpoint):
                found.append(checkpoint)
        return found

    def next_materialization_id(self, key: TaskKey, now_ms: int) -> MaterializationId:
        """Increasing per task, and unique even if the last ids were not read back: the
        larger of (the highest id seen + 1) and the current time in milliseconds."""
        chosen = max(self._max_id.get(key, 0) + 1, now_ms)
        self._max_id[key] = chosen
        return MaterializationId(chosen)

    def tasks_of_current_attempts(self) -> set[TaskKey]:
        """Every task key some current registration lists (replicas of others can be dropped)."""
        return {(job, t.task_id) for job, r in self.registrations.items() if not r.finished
                for t in r.tasks}
