"""Protocol messages for tests of the services' logic: job registrations, task assignments,
completed and discarded checkpoints, materializations.

One place builds them, so the changelog, materializer and service tests agree on the shapes.
Defaults: 128 key groups, epoch 1, an exactly-once job, timestamps 0 (pass ``at`` where a test
needs a real instant).
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    TaskId,
    task_id,
)

MAX_PARALLELISM = 128


def task_assignments(operator: OperatorId, parallelism: int,
                     max_parallelism: int = MAX_PARALLELISM) -> tuple[TaskAssignment, ...]:
    """Even key-group ranges, the last task taking the remainder."""
    size = max_parallelism // parallelism
    return tuple(TaskAssignment(task_id(operator, i), operator, i, KeyGroup(i * size),
                                KeyGroup(max_parallelism - 1 if i == parallelism - 1 else (i + 1) * size - 1))
                 for i in range(parallelism))


def job_registration(job: JobId, tasks: tuple[TaskAssignment, ...], *, epoch: int = 1,
                     changelog_partitions: int = 4, source_tasks: Iterable[TaskId] = (), at: int = 0,
                     finished: bool = False) -> JobRegistration:
    """An exactly-once attempt whose operators all run in changelog mode."""
    operators = tuple(dict.fromkeys(t.operator_id for t in tasks))
    return JobRegistration(job, Epoch(epoch), CheckpointingMode.EXACTLY_ONCE, MAX_PARALLELISM, tasks,
                           tuple(source_tasks), at, finished, changelog_operators=operators,
                           changelog_partitions=changelog_partitions)


def checkpoint_metadata(job: JobId, checkpoint_id: int, tasks: Iterable[TaskSnapshot], *, epoch: int = 1,
                        kind: CheckpointType = CheckpointType.CHECKPOINT, at: int = 0) -> CheckpointMetadata:
    """A completed checkpoint (or savepoint, by ``kind``) of ``tasks``."""
    return CheckpointMetadata(job, CheckpointId(checkpoint_id), kind, at, at, MAX_PARALLELISM, tuple(tasks),
                              Epoch(epoch))


def checkpoint_discarded(job: JobId, checkpoint_id: int, reason: str = "retention", at: int = 0) -> CheckpointDiscarded:
    return CheckpointDiscarded(job, CheckpointId(checkpoint_id), at, reason)


def materialization(job: JobId, task: TaskId, operator: OperatorId, checkpoint_id: int, materialization_id: int,
                    ranges: tuple[ChangelogRange, ...], *,
                    status: MaterializationStatus = MaterializationStatus.COMPLETED,
                    at: int = 0) -> MaterializationEvent:
    """A materialization event without files (the ledgers and the changelog service need none)."""
    return MaterializationEvent(job, task, operator, MaterializationId(materialization_id), status,
                                CheckpointId(checkpoint_id), ranges, (), at)
