"""`make demo`'s program: the real job through a SIGKILL to an exactly-once verdict, or a clean stop
on Ctrl-C; either way nothing is left running (Spark's JVMs included)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_support import processes_mentioning

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1000)]  # an interrupted demo run, then a whole one of up to 700 s under load


def _as_at_a_terminal() -> None:
    """Ctrl-C works as at a terminal even when the suite runs in the background (a shell's
    background job inherits SIGINT ignored, and Python then keeps ignoring it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _demo(home: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    return subprocess.Popen([sys.executable, "-m", "tidemark.cli", "demo", "--home", str(home)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=_as_at_a_terminal)


def _gone(marker: str, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while processes_mentioning(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not processes_mentioning(marker)


def _interrupted_while_its_workers_start(home: Path) -> None:
    """A demo stopped with Ctrl-C while the job's Spark workers start: exit 130, nothing left running."""
    process = _demo(home)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if "PySpark worker processes (" in line:
            break
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, "".join(lines) + output
    assert _gone(str(home)), "Ctrl-C left processes behind"
    assert not (home / "demo" / "broker" / "broker.json").exists()


def test_demo_twice_in_a_row_the_first_interrupted_the_second_through_a_sigkill_exactly_once(tmp_path):
    """`make demo` twice in a row in the same home. The first run is interrupted with Ctrl-C while
    its workers start (the harder start for the next run: a broker, services and a job stopped
    mid-run rather than at their end, JVMs half started) and leaves nothing running; the second
    starts clean and goes through the whole demo: a worker's SIGKILL, the restore, an exactly-once
    verdict."""
    _interrupted_while_its_workers_start(tmp_path)
    process = _demo(tmp_path)
    output, _ = process.communicate(timeout=700)
    assert process.returncode == 0, output
    assert output.count("/readyz -> 200") == 4
    assert "embedded broker ready: kafka at 127.0.0.1:" in output
    assert "live: " in output and "checkpoints completed" in output  # progress while it waits
    assert "SIGKILL -> top_urls worker 1 of 2" in output and "restored both stages from checkpoint" in output
    assert "every stage processing records again" in output
    # fused workers: each minute_counts worker runs its exchange reader in its own process
    assert "worker processes          4 (minute_counts x2 (each with minute_counts.read), top_urls x2)" in output
    assert "exactly-once verdict      PASS" in output
    closed = re.search(r"minutes closed\s+(\d+) by the watermark", output)
    assert closed and int(closed.group(1)) >= 5, output  # event-time windows, each emitted once
    assert "broker start-up           kafka" in output
    assert "demo OK" in output
    assert _gone(str(tmp_path)), "demo left processes behind"
    assert not (tmp_path / "demo" / "broker" / "broker.json").exists()
