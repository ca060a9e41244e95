"""Which worker process runs each task of a job attempt, as its registration records it (pure).

A stage (operator) of parallelism P runs as W worker processes. ``JobRegistration.workers``
(v4) holds, for each entry of ``tasks`` in the same order, the index (0 .. W-1) of the worker of
that task's stage that runs it; the supervisor fills it with
:func:`tidemark.runtime.job.ownership.worker_of`. Empty means every task runs in worker 0: a
registration written before v4, or by a job whose stages each run in one process.

The coordinator checks a registration with :func:`registration_problem` before folding it (a
registration with a problem is rejected: logged with the problem and dead-lettered, see
:mod:`tidemark.services.coordinator.edge`), and ``GET /jobs`` shows :func:`tasks_by_worker`.
"""

from __future__ import annotations

from tidemark.protocol.messages import JobRegistration
from tidemark.types import OperatorId, TaskId

WorkerTasks = tuple[tuple[TaskId, ...], ...]
"""The task ids of each worker of one stage, indexed by worker, each in subtask order."""


def registration_problem(registration: JobRegistration) -> str | None:
    """Why ``registration``'s worker assignment cannot be used, in one line; ``None`` when it can
    (empty ``workers``, or one non-negative index per task)."""
    workers, tasks = registration.workers, registration.tasks
    if not workers:
        return None
    if len(workers) != len(tasks):
        return (f"it names a worker for {len(workers)} task(s) but has {len(tasks)} task(s); "
                f"workers must hold one index per task, in the order of tasks")
    for task, worker in zip(tasks, workers):
        if worker < 0:
            return f"task {task.task_id} has the negative worker index {worker}"
    return None


def worker_of_each_task(registration: JobRegistration) -> tuple[int, ...]:
    """The worker index of each entry of ``registration.tasks`` (all 0 when ``workers`` is empty).
    Raises ``ValueError`` for a registration :func:`registration_problem` rejects."""
    problem = registration_problem(registration)
    if problem is not None:
        raise ValueError(f"registration of {registration.job_id} attempt {registration.epoch}: {problem}")
    return registration.workers or (0,) * len(registration.tasks)


def tasks_by_worker(registration: JobRegistration) -> dict[OperatorId, WorkerTasks]:
    """Each stage's tasks grouped by the worker that runs them: stages in the order of their first
    task in ``registration.tasks``; one entry per worker index from 0 to the stage's highest (a
    worker given no task has an empty entry); tasks by subtask index. Raises ``ValueError`` like
    :func:`worker_of_each_task`."""
    placed: dict[OperatorId, list[tuple[int, int, TaskId]]] = {}
    for task, worker in zip(registration.tasks, worker_of_each_task(registration)):
        placed.setdefault(task.operator_id, []).append((worker, task.subtask_index, task.task_id))
    grouped: dict[OperatorId, WorkerTasks] = {}
    for operator, entries in placed.items():
        count = max(worker for worker, _, _ in entries) + 1
        grouped[operator] = tuple(
            tuple(task_id for w, _, task_id in sorted(entries) if w == index) for index in range(count))
    return grouped
