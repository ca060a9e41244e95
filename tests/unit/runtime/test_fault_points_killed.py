"""Every fault point of the runtime is a SIGKILL in some whole-pipeline test.

The end-to-end tests share the fault points between them (each kill costs a worker's JVM start),
so no one file names them all; this test keeps the union complete when a point is added or a kill
is moved.
"""

from __future__ import annotations

import re
from pathlib import Path

from tidemark.runtime.job.faults import POINTS

E2E = Path(__file__).resolve().parents[2] / "e2e"
KILL = re.compile(r'"\d+@[\w.]+@([a-z-]+):\d+"')  # TIDEMARK_FAULT's attempt@stage@point:count


def killed_points() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(E2E.glob("test_*.py")):
        for point in KILL.findall(path.read_text()):
            found.setdefault(point, []).append(path.name)
    return found


def test_every_fault_point_is_killed_in_an_end_to_end_test() -> None:
    found = killed_points()
    assert set(found) <= POINTS, f"unknown points in the e2e tests: {sorted(set(found) - POINTS)}"
    missing = sorted(POINTS - set(found))
    assert not missing, f"fault points no end-to-end test kills a worker at: {missing}"
