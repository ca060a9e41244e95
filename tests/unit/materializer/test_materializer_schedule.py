"""When tasks are materialized: interval, per-task jitter, failure budget and backoff (pure)."""

from __future__ import annotations

import random

import pytest

from tidemark.materializer import MaterializationOptions, MaterializationSchedule
from tidemark.types import JobId, TaskId

A = (JobId("orders"), TaskId("counts#0"))
B = (JobId("orders"), TaskId("counts#1"))
OPTIONS = MaterializationOptions(interval_ms=1000, jitter_ms=200, failure_budget=2, max_backoff_ms=5000)


def test_a_task_is_first_due_one_interval_plus_its_jitter_after_it_appears() -> None:
    schedule = MaterializationSchedule(OPTIONS, random.Random(1))
    assert schedule.due([A, B], 0) == []
    firsts = [schedule.next_due(A), schedule.next_due(B)]
    assert all(1000 <= t < 1200 for t in firsts) and firsts[0] != firsts[1]  # jitter per task
    assert schedule.due([A, B], 1199) == sorted([A, B], key=lambda k: schedule.next_due(k))


def test_a_known_last_materialization_sets_the_first_due_time() -> None:
    schedule = MaterializationSchedule(MaterializationOptions(1000, 0, 1, 1000))
    schedule.due([A], 10_000, since_ms=lambda key: 9_500)
    assert schedule.next_due(A) == 10_500


def test_success_waits_another_interval_and_failures_back_off_past_the_budget() -> None:
    schedule = MaterializationSchedule(MaterializationOptions(1000, 0, 2, 5000))
    schedule.due([A], 0)
    assert not schedule.failed(A, 1000) and schedule.next_due(A) == 2000  # within the budget
    assert schedule.failed(A, 2000) and schedule.next_due(A) == 4000  # budget spent: 2 intervals
    assert schedule.failed(A, 4000) and schedule.next_due(A) == 8000  # then 4
    assert schedule.failed(A, 8000) and schedule.next_due(A) == 13000  # capped at max_backoff
    assert schedule.failures(A) == 4
    schedule.succeeded(A, 13000)
    assert schedule.failures(A) == 0 and schedule.next_due(A) == 14000
    schedule.forget(A)
    assert schedule.next_due(A) is None


def test_options_are_checked() -> None:
    with pytest.raises(ValueError):
        MaterializationOptions(interval_ms=1000, max_backoff_ms=500)
    with pytest.raises(ValueError):
        MaterializationOptions(failure_budget=0)
