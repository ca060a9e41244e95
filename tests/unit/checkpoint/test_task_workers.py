"""The worker assignment a registration records (``JobRegistration.workers``, v4): checked, grouped."""

from __future__ import annotations

from dataclasses import replace

import pytest

from checkpoint_support import registration
from tidemark.checkpoint.task_workers import registration_problem, tasks_by_worker, worker_of_each_task
from tidemark.runtime.job.ownership import worker_of


def test_without_workers_every_task_runs_in_worker_zero() -> None:
    old = registration(parallelism=3)  # as a writer before v4, or W = 1, leaves it
    assert old.workers == () and registration_problem(old) is None
    assert worker_of_each_task(old) == (0,) * 6
    assert tasks_by_worker(old) == {"src": (("src#0", "src#1", "src#2"),), "agg": (("agg#0", "agg#1", "agg#2"),)}


def test_tasks_are_grouped_by_stage_and_worker_as_the_ownership_function_assigns_them() -> None:
    base = registration(parallelism=5)
    workers = {"src": 2, "agg": 3}
    assigned = replace(base, workers=tuple(worker_of(t.subtask_index, 5, workers[t.operator_id]) for t in base.tasks))
    assert registration_problem(assigned) is None
    assert tasks_by_worker(assigned) == {
        "src": (("src#0", "src#1", "src#2"), ("src#3", "src#4")),
        "agg": (("agg#0", "agg#1"), ("agg#2", "agg#3"), ("agg#4",)),
    }


def test_tasks_keep_subtask_order_whatever_the_order_of_the_registration() -> None:
    base = registration(parallelism=3)
    shuffled = replace(base, tasks=tuple(reversed(base.tasks)), workers=(1, 0, 0, 1, 0, 0))  # agg#2 .. src#0
    assert tasks_by_worker(shuffled) == {"agg": (("agg#0", "agg#1"), ("agg#2",)),
                                         "src": (("src#0", "src#1"), ("src#2",))}


def test_a_worker_given_no_task_shows_as_an_empty_entry() -> None:
    gap = replace(registration(parallelism=2), workers=(0, 2, 0, 0))
    assert tasks_by_worker(gap)["src"] == (("src#0",), (), ("src#1",))


@pytest.mark.parametrize(("workers", "problem"), [
    ((0, 1, 0), "it names a worker for 3 task(s) but has 4 task(s); workers must hold one index per task, "
                "in the order of tasks"),
    ((0, 1, 0, 0, 1), "it names a worker for 5 task(s) but has 4 task(s); workers must hold one index per task, "
                      "in the order of tasks"),
    ((0, 0, -1, 0), "task agg#0 has the negative worker index -1"),
])
def test_a_registration_whose_workers_do_not_fit_its_tasks_has_a_one_line_problem(
        workers: tuple[int, ...], problem: str) -> None:
    bad = replace(registration(parallelism=2), workers=workers)
    assert registration_problem(bad) == problem
    with pytest.raises(ValueError, match=f"registration of job attempt 0: {problem[:20]}"):
        tasks_by_worker(bad)


def test_a_finished_registration_without_tasks_has_no_workers() -> None:
    ended = replace(registration(), tasks=(), finished=True)
    assert registration_problem(ended) is None and tasks_by_worker(ended) == {}
    assert registration_problem(replace(ended, workers=(0,))) is not None
