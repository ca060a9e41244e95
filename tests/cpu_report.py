"""The CPU each test costs, for keeping the suite fast by design (``PYTEST_CPU_REPORT=<file>``).

The suite is CPU-bound on a 2-core machine, so a test's wall time says little (it depends on
what the other lanes run beside it). With the variable set, each pytest process (each lane of
``pytest -n``) moves itself into a cgroup of its own (:mod:`tidemark.local.cpu_quota`, capped at
every core, so nothing is held back) before its first test. Everything the lane starts is born
there (brokers, services, supervisors, stage workers and their JVMs, also after they are
reparented), so the group's CPU time before and after each test is what that test cost, whatever
ran in the other lanes meanwhile. One JSON line per test is appended to the file:
``{"test", "lane", "tier", "cpu_s", "wall_s", "end_s"}`` (``end_s``: seconds since the lane's
first test began, so the lanes' timelines line up). ``python tests/cpu_report.py <file>`` prints the tests and
the files that cost the most. Without the variable (or without a writable cpu controller: not
root) nothing happens.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

REPORT_ENV = "PYTEST_CPU_REPORT"  # not TIDEMARK_*: the services refuse settings they do not know


class CpuReport:
    """The lane's cgroup and the report file (see the module)."""

    def __init__(self, path: Path) -> None:
        from tidemark.local.cpu_quota import CpuQuota, cpu_controller

        self.path = path
        self.group = CpuQuota(cpu_controller(), f"tests-{os.getpid()}", cores=float(os.cpu_count() or 1))
        self.group.add(os.getpid())
        self.lane = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.started: float | None = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        cpu, wall = self.group.usage_s(), time.monotonic()
        if self.started is None:
            self.started = wall
        yield
        tier = next((m.name for m in item.iter_markers() if m.name in ("unit", "integration", "e2e")), "")
        now = time.monotonic()
        line = json.dumps({"test": item.nodeid, "lane": self.lane, "tier": tier,
                           "cpu_s": round(self.group.usage_s() - cpu, 2), "wall_s": round(now - wall, 2),
                           "end_s": round(now - self.started, 1)})
        with open(self.path, "a", encoding="utf-8") as out:  # one short write per line: lanes do not interleave
            out.write(line + "\n")

    def pytest_sessionfinish(self) -> None:
        self.group.close()


def install(config: pytest.Config) -> None:
    """Register the report when the variable asks for it and the machine allows it."""
    target = os.environ.get(REPORT_ENV)
    if not target:
        return
    from tidemark.local.cpu_quota import QuotaUnavailable

    try:
        config.pluginmanager.register(CpuReport(Path(target)), "tidemark-cpu-report")
    except (QuotaUnavailable, OSError) as exc:
        print(f"{REPORT_ENV}: no CPU report ({exc})", file=sys.stderr)


def summary(path: Path, top: int = 40) -> str:
    """The costliest tests and files, and the totals per tier."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    tiers: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for row in rows:
        name = row["test"].split("::")[0]
        files[name][0] += row["cpu_s"]
        files[name][1] += row["wall_s"]
        tiers[row["tier"]][0] += row["cpu_s"]
        tiers[row["tier"]][1] += row["wall_s"]
        tiers[row["tier"]][2] += 1
    total = sum(row["cpu_s"] for row in rows) or 1.0
    lanes: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        lane = lanes[row.get("lane", "?")]
        lane[0] += row["cpu_s"]
        lane[1] = max(lane[1], row.get("end_s", 0.0))
    out = [f"{len(rows)} tests, {total:,.0f} CPU-s", "", "| lane | CPU-s | last test ended at (s) |", "|---|---|---|"]
    out += [f"| {name} | {c:,.0f} | {end:,.0f} |" for name, (c, end) in sorted(lanes.items())]
    out += ["", "| tier | tests | CPU-s | share | wall-s |", "|---|---|---|---|---|"]
    out += [f"| {t or '?'} | {n} | {c:,.0f} | {c / total:.0%} | {w:,.0f} |" for t, (c, w, n) in sorted(tiers.items())]
    out += ["", "| file | CPU-s | share | wall-s |", "|---|---|---|---|"]
    out += [f"| {f} | {c:,.1f} | {c / total:.1%} | {w:,.0f} |"
            for f, (c, w) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]]
    out += ["", "| test | CPU-s | wall-s |", "|---|---|---|"]
    out += [f"| {r['test']} | {r['cpu_s']:,.1f} | {r['wall_s']:,.0f} |"
            for r in sorted(rows, key=lambda r: -r["cpu_s"])[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
