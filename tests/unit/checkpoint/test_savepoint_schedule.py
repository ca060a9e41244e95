"""Periodic savepoints and the retained savepoint history: when one is due, which ones go."""

from __future__ import annotations

import pytest

from tidemark.checkpoint.savepoint_schedule import SavepointPolicy, periodic_savepoint_due, savepoints_to_dispose
from tidemark.types import CheckpointId

EVERY_10S = SavepointPolicy(interval_ms=10_000, retained=2)


def due(policy: SavepointPolicy = EVERY_10S, *, running: bool = True, request_open: bool = False,
        since_ms: int | None = 0, now_ms: int = 10_000) -> bool:
    return periodic_savepoint_due(policy, running=running, request_open=request_open, since_ms=since_ms,
                                  now_ms=now_ms)


def test_a_savepoint_is_due_one_interval_after_the_last_one_or_the_start() -> None:
    assert due(now_ms=10_000) and due(now_ms=25_000)
    assert not due(now_ms=9_999)
    assert not due(since_ms=None)  # never seen running: never at once


def test_none_is_due_for_a_job_not_running_with_a_request_open_or_without_periodic_savepoints() -> None:
    assert not due(running=False)
    assert not due(request_open=True, now_ms=100_000)
    assert not due(SavepointPolicy(interval_ms=0, retained=2), now_ms=100_000)


def test_the_oldest_savepoints_beyond_the_retained_count_are_disposed() -> None:
    ids = [CheckpointId(i) for i in (40, 12, 7, 33)]
    assert savepoints_to_dispose(EVERY_10S, ids) == (7, 12)
    assert savepoints_to_dispose(SavepointPolicy(retained=1), ids) == (7, 12, 33)  # never the newest
    assert savepoints_to_dispose(EVERY_10S, ids[:2]) == ()
    assert savepoints_to_dispose(SavepointPolicy(interval_ms=10_000, retained=0), ids) == ()  # keep all


def test_a_negative_policy_is_refused() -> None:
    with pytest.raises(ValueError):
        SavepointPolicy(interval_ms=-1)
    with pytest.raises(ValueError):
        SavepointPolicy(retained=-1)
