"""The stage's snapshot thread: while any asynchronous part of this process runs, the interpreter
lock changes hands every 0.2 ms (so the part's file operations do not each wait for the processing
thread's next 5 ms); the default comes back when the last one ends, also after a failure."""

from __future__ import annotations

import sys
import threading

import pytest

from tidemark.runtime.worker.checkpoint import SNAPSHOT_SWITCH_INTERVAL_S, SnapshotThread


def test_the_switch_interval_is_short_only_while_parts_of_any_stage_run() -> None:
    default = sys.getswitchinterval()
    first, second = SnapshotThread("a"), SnapshotThread("b")
    started = [threading.Event(), threading.Event()]
    release = [threading.Event(), threading.Event()]
    seen: list[float] = []

    def part(n: int) -> None:
        started[n].set()
        release[n].wait(10)
        seen.append(sys.getswitchinterval())

    try:
        first.submit(lambda: part(0))
        assert started[0].wait(10)
        second.submit(lambda: part(1))
        assert started[1].wait(10)
        assert sys.getswitchinterval() == pytest.approx(SNAPSHOT_SWITCH_INTERVAL_S)
        release[0].set()
        first.close(wait=True)
        assert sys.getswitchinterval() == pytest.approx(SNAPSHOT_SWITCH_INTERVAL_S)  # the other stage's part still runs
        second.submit(lambda: 1 / 0)  # queued behind the running part; fails (logged: closing)
        release[1].set()
        second.close(wait=True)
    finally:
        for event in release:
            event.set()
    assert seen == pytest.approx([SNAPSHOT_SWITCH_INTERVAL_S] * 2)
    assert sys.getswitchinterval() == default
