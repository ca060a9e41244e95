"""A stage's record path on the runtime's own tasks (two heap tasks, no Kafka), for unit tests of
what happens to one record: :func:`record_path` and the :class:`Failures` it reports to."""

from __future__ import annotations

from typing import Any

from tidemark.api import Stage
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange
from tidemark.operators.time import StageTime
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.clock import StageClock
from tidemark.runtime.worker.inputs import RecordPath
from tidemark.runtime.worker.routing import KeyGroupRouter
from tidemark.runtime.worker.task import StageTask
from tidemark.state.backend_registry import BackendContext, create_backend


class Failures:
    """The error policy's part: what failed, with why."""

    def __init__(self) -> None:
        self.failed: list[tuple[InputRecord, Exception]] = []

    def record_failed(self, record: InputRecord, error: Exception) -> None:
        self.failed.append((record, error))


def record_path(stage: Stage, tmp_path: Any, copies_from: dict[str, int] | None = None, owned: int | None = None
                ) -> tuple[RecordPath, list[StageTask], Failures]:
    """``stage``'s record path over its two opened tasks (max parallelism 128), or over task
    ``owned`` alone (a worker owning half of the key groups)."""
    tasks = []
    for assignment in plan_assignments((stage.operator_id,), 2, 128):
        if owned is not None and assignment.subtask_index != owned:
            continue
        context = BackendContext(KeyGroupRange(assignment.key_group_start, assignment.key_group_end), 128,
                                 stage.name, tmp_path / str(assignment.subtask_index))
        task = StageTask(stage, assignment, 2, create_backend("heap", context), StageTime())
        task.open()
        tasks.append(task)
    failures = Failures()
    clock = StageClock("job", stage, 0, None, tasks, StageTime(), {}, channels=set())
    router = KeyGroupRouter(128, [t.key_groups for t in tasks], complete=owned is None)
    path = RecordPath(stage, tasks, router, clock, failures, copies_from)
    return path, tasks, failures
