"""The grace period a new instance owes its predecessors (tidemark.chassis.predecessors): owed to
one that may still run, not to one provably gone, and owed again when a provably gone one claimed
so recently that the instance before it may not have seen its claim."""

from __future__ import annotations

import pytest

from tidemark.chassis.predecessors import Whereabouts, grace_owed, here, provably_gone

pytestmark = pytest.mark.unit

ME = Whereabouts("boot-1", "pid:[4026531836]", 500, 9000)
GRACE = 1500
NOW = 1_000_000
RUNNING = {100: 7000, 200: 8000}  # pid -> start time of the processes that run


def started(pid: int) -> int | None:
    return RUNNING.get(pid)


def claim(pid: int, pid_started: int, claimed_at: int, **where: str) -> dict[str, object]:
    return {"service": "coordinator", "instance": f"i{pid}", "boot_id": where.get("boot_id", ME.boot_id),
            "pid_namespace": where.get("pid_namespace", ME.pid_namespace), "pid": pid,
            "pid_started": pid_started, "claimed_at": claimed_at}


def test_a_running_predecessor_is_owed_the_grace() -> None:
    assert grace_owed([claim(100, 7000, NOW - 60_000)], NOW, GRACE, ME, started)


def test_a_predecessor_whose_process_is_gone_is_owed_nothing() -> None:
    assert not grace_owed([claim(300, 7500, NOW - 60_000)], NOW, GRACE, ME, started)


def test_a_reused_pid_is_another_process() -> None:
    assert provably_gone(claim(100, 6999, NOW), ME, started)
    assert not provably_gone(claim(100, 7000, NOW), ME, started)


@pytest.mark.parametrize("where", [{"boot_id": "boot-2"}, {"pid_namespace": "pid:[4026532000]"}])
def test_nothing_is_concluded_about_a_process_of_another_kernel_or_pid_namespace(where) -> None:
    gone_here = claim(300, 7500, NOW - 60_000, **where)  # pid 300 runs nowhere here
    assert not provably_gone(gone_here, ME, started)
    assert grace_owed([gone_here], NOW, GRACE, ME, started)


def test_a_claim_without_whereabouts_proves_nothing() -> None:
    old_format = {"service": "coordinator", "instance": "old", "host": "h", "pid": 300, "claimed_at": NOW - 60_000}
    assert grace_owed([old_format], NOW, GRACE, ME, started)
    assert not provably_gone(claim(300, 7500, NOW), Whereabouts(None, None, 500, None), started)


def test_the_instance_before_a_recently_gone_one_is_owed_the_grace_unless_gone_too() -> None:
    # 200 ran; 300 claimed 0.5 s ago (fencing 200) and died; 200 may not have seen that claim yet
    assert grace_owed([claim(200, 8000, NOW - 60_000), claim(300, 7500, NOW - 500)], NOW, GRACE, ME, started)
    assert not grace_owed([claim(201, 8000, NOW - 60_000), claim(300, 7500, NOW - 500)], NOW, GRACE, ME, started)
    # 300 claimed twice the grace ago: 200 had the grace, and 300's commit, to see it
    assert not grace_owed([claim(200, 8000, NOW - 60_000), claim(300, 7500, NOW - 2 * GRACE)], NOW, GRACE, ME,
                          started)


def test_the_first_instance_and_recent_gone_ones_with_nothing_kept_before_them_owe_the_grace() -> None:
    assert grace_owed([], NOW, GRACE, ME, started)  # compaction may have dropped older claims
    assert grace_owed([claim(300, 7500, NOW - 400)], NOW, GRACE, ME, started)


def test_this_process_is_running_by_its_own_whereabouts() -> None:
    me = here()
    assert me.pid_started is not None
    assert not provably_gone({**me.fields(), "claimed_at": NOW}, me)
