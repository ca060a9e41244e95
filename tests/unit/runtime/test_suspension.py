"""A job suspended for a deployment generation stays suspended until that generation starts it
(runtime.supervisor.suspension): the chart's old worker pod, stopped by the pre-upgrade hook,
neither exits (to be restarted) nor, restarted anyway, resumes the job."""

from __future__ import annotations

import pytest

from tidemark.runtime.supervisor.suspension import held_at_end, held_at_start, wait_while

pytestmark = pytest.mark.unit


def job(generation: int | None, state: str = "SUSPENDED") -> dict[str, object]:
    return {"job": "orders", "state": state, "suspended_generation": generation}


def test_a_start_of_an_older_generation_is_held_while_the_job_is_suspended_for_a_newer_one() -> None:
    assert held_at_start(job(7), 6) == (
        "job orders is suspended for generation 7 (a newer deployment stopped it with a savepoint to resume it); "
        "this start is generation 6: it waits to be replaced")
    assert held_at_start(job(7), 7) is None  # the upgraded release resumes it
    assert held_at_start(job(7), 8) is None
    assert held_at_start(job(7), None) is None  # a start without a generation (by hand)
    assert held_at_start(job(None), 6) is None  # suspended by hand: any start resumes it
    assert held_at_start(job(7, state="RUNNING"), 6) is None
    assert held_at_start(None, 6) is None  # a job the coordinator does not know yet


def test_a_supervisor_stopped_for_a_newer_generation_or_any_when_it_has_none_waits_instead_of_exiting() -> None:
    assert held_at_end(job(7), 6) == (
        "job orders stopped with a savepoint for generation 7 (this supervisor's: 6); it waits to be replaced "
        "instead of exiting, so that no restart here resumes the job")
    assert held_at_end(job(7), None) is not None  # a release that never passed a generation
    assert held_at_end(job(7), 7) is None
    assert held_at_end(job(None), None) is None  # a stop by hand: exit 0 as ever
    assert held_at_end(job(7, state="RUNNING"), 6) is None  # resumed elsewhere meanwhile


def test_waiting_ends_when_the_job_is_resumed_elsewhere_or_the_supervisor_is_stopped() -> None:
    answers = iter([job(7), job(7), job(None, state="RUNNING")])
    assert wait_while(held_at_start, lambda: next(answers), 6, stopping=lambda: False, poll_s=0) is True
    stops = iter([False, False, True])
    assert wait_while(held_at_start, lambda: job(7), 6, stopping=lambda: next(stops), poll_s=0) is False
