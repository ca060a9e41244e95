"""An attempt's start-up breakdown: each step's seconds since the one before, the first mark of a
step counting, reported once."""

from __future__ import annotations

import pytest

from tidemark.runtime.worker import start_timings
from tidemark.runtime.worker.start_timings import StartTimings

pytestmark = pytest.mark.unit


def test_each_step_counts_from_the_one_before_and_the_breakdown_is_logged_once(monkeypatch) -> None:
    clock = iter([100.0, 101.5, 104.0, 104.5, 104.9, 107.0, 108.0])
    monkeypatch.setattr(start_timings.time, "monotonic", lambda: next(clock))
    timings = StartTimings(fresh_process=False)
    for step in ("restore", "session", "query", "query", "first_fetch", "first_process"):
        timings.mark(step)  # the second "query" mark takes a clock reading and changes nothing
    assert timings.breakdown() == {"process_s": None, "restore_s": 1.5, "session_s": 2.5, "query_s": 0.5,
                                   "first_fetch_s": 2.5, "first_process_s": 1.0, "total_s": 8.0}
    logged = []
    monkeypatch.setattr(start_timings.log, "info", lambda event, **fields: logged.append((event, fields)))
    timings.report(stage="s")
    timings.report(stage="s")
    assert [event for event, _ in logged] == ["attempt started up"] and logged[0][1]["stage"] == "s"


def test_a_fresh_process_knows_its_age() -> None:
    age = StartTimings(fresh_process=True).process_s
    assert age is not None and 0 <= age < 24 * 3600
