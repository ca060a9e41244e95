"""``tidemark.processes.paused``: the block starts only when every thread of the process is stopped
(SIGSTOP is delivered asynchronously: a broker thread on a CPU once answered a request sent right
after ``kill`` returned, and a test that needed the broker silent saw an answer), and the process
runs again after the block, also when the block raised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tidemark.processes import paused

pytestmark = pytest.mark.unit

_THREADS = """
import threading, time
def spin():
    while True:
        sum(range(1000))
for _ in range(3):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _states(pid: int) -> set[str]:
    return {(task / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            for task in Path(f"/proc/{pid}/task").iterdir()}


def test_every_thread_is_stopped_in_the_block_and_runs_after_it() -> None:
    child = subprocess.Popen([sys.executable, "-c", _THREADS], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        with paused(child.pid):
            assert _states(child.pid) == {"T"}
        assert "T" not in _states(child.pid)
        with pytest.raises(RuntimeError), paused(child.pid):
            raise RuntimeError("the block failed")
        assert "T" not in _states(child.pid)
    finally:
        child.kill()
        child.wait()
