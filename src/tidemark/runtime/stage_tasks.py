"""Building a stage's tasks: one per key-group range, each with its keyed backend.

``build_stage_tasks(...)`` is called once per attempt, before the restore: it plans the task
assignments of the stage's operator (Flink's key-group ranges), creates each task's keyed backend
(heap or RocksDB on local disk under ``local_dir``) and, in changelog mode, wraps it so every state
change is also written to the stage's changelog topic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.changelog import ChangelogStateBackend, ChangelogWriter
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import TaskAssignment, TaskSnapshot
from tidemark.runtime.api import JobSpec, Stage
from tidemark.runtime.task import StageTask, create_backend
from tidemark.types import Epoch


@dataclass(frozen=True)
class ChangelogTarget:
    """Where a changelog-mode stage writes its state changes."""

    client: dict[str, Any]
    topic: str
    partitions: int
    epoch: Epoch


def build_stage_tasks(spec: JobSpec, stage: Stage, parallelism: int, local_dir: Path,
                      changelog: ChangelogTarget | None) -> list[StageTask]:
    tasks = []
    for assignment in plan_assignments((stage.operator_id,), parallelism, spec.max_parallelism):
        backend: Any = create_backend(spec.state_backend, key_group_range(assignment), spec.max_parallelism,
                                      stage.name, local_dir / assignment.task_id.replace("#", "-"))
        if changelog is not None:
            writer = ChangelogWriter(changelog.client, changelog.topic, partitions=changelog.partitions,
                                     max_parallelism=spec.max_parallelism, job_id=spec.job_id,
                                     task_id=assignment.task_id, epoch=changelog.epoch)
            backend = ChangelogStateBackend(backend, writer)
        tasks.append(StageTask(stage, assignment, parallelism, backend))
    return tasks


def key_group_range(assignment: TaskAssignment | TaskSnapshot) -> KeyGroupRange:
    return KeyGroupRange(assignment.key_group_start, assignment.key_group_end)
