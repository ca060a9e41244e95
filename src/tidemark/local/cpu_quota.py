"""CPU quotas for process trees through Linux cgroups: worker processes measured as if each had its
own machine.

A :class:`CpuQuota` is one cgroup of the cpu controller capped at ``cores`` CPUs (cgroup v2
``cpu.max``; v1 ``cpu.cfs_quota_us`` over ``cpu.cfs_period_us``). The processes added to it, and
every process they start afterwards (a child is born in its parent's group), share that much CPU
time whatever else the machine runs; :meth:`CpuQuota.usage_s` says how much they used and
:meth:`CpuQuota.periods` how often the cap held them back. ``bench/bench_scaling.py`` gives each
worker of a stage its own quota, so that W workers get W times the CPU of one on a machine with
fewer cores than that would take.

Lifecycle: :func:`cpu_controller` finds the controller (v2 where the unified hierarchy offers
``cpu``, else the v1 ``cpu`` hierarchy with ``cpuacct`` beside it for the usage) or raises
:class:`QuotaUnavailable` saying why (not root, no controller); ``CpuQuota(controller, name,
cores)`` creates ``tidemark-quota/<name>`` -> :meth:`CpuQuota.add` for each process ->
:meth:`CpuQuota.close` moves what still runs back to the root group and removes the group.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PERIOD_US = 100_000  # the scheduler's accounting period: the quota is cores x this per period
GROUP = "tidemark-quota"  # the parent of every quota's group


class QuotaUnavailable(RuntimeError):
    """No writable cpu controller here; the message says why."""


@dataclass(frozen=True)
class CpuController:
    """Where quotas are made: ``cpu``, the hierarchy that caps, and ``accounting``, the one that
    counts the CPU time used (the same directory on v2, and on v1 when cpu and cpuacct are
    mounted together)."""

    version: int
    cpu: Path
    accounting: Path


def _mounts(mounts_file: Path) -> list[tuple[Path, str, set[str]]]:
    """(mount point, type, options) of each cgroup mount."""
    found = []
    for line in mounts_file.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((Path(fields[1]), fields[2], set(fields[3].split(","))))
    return found


def cpu_controller(mounts_file: Path = Path("/proc/self/mounts")) -> CpuController:
    """The cpu controller this process can make quotas in (see the module docstring)."""
    mounts = _mounts(mounts_file)
    for point, kind, _ in mounts:
        controllers = point / "cgroup.controllers"
        if kind == "cgroup2" and controllers.exists() and "cpu" in controllers.read_text().split():
            return _writable(CpuController(2, point, point))
    cpu = next((point for point, kind, options in mounts if kind == "cgroup" and "cpu" in options), None)
    accounting = next((point for point, kind, options in mounts if kind == "cgroup" and "cpuacct" in options), None)
    if cpu is None or accounting is None:
        raise QuotaUnavailable("no cgroup cpu controller is mounted (cgroup v2 with 'cpu' enabled, or the v1 "
                               "cpu and cpuacct hierarchies)")
    return _writable(CpuController(1, cpu, accounting))


def _writable(controller: CpuController) -> CpuController:
    for root in {controller.cpu, controller.accounting}:
        if not os.access(root, os.W_OK):
            raise QuotaUnavailable(f"the cgroup hierarchy {root} is not writable (run as root, or delegate it)")
    return controller


class CpuQuota:
    """One group of processes capped at ``cores`` CPUs (see the module docstring)."""

    def __init__(self, controller: CpuController, name: str, cores: float) -> None:
        if cores <= 0:
            raise ValueError(f"a CPU quota needs cores > 0, not {cores}")
        self.controller = controller
        self.name = name
        self.cores = cores
        self.dirs = [root / GROUP / name for root in dict.fromkeys([controller.cpu, controller.accounting])]
        if controller.version == 2:
            _enable_cpu(controller.cpu)
            (controller.cpu / GROUP).mkdir(exist_ok=True)
            _enable_cpu(controller.cpu / GROUP)
        for path in self.dirs:
            path.mkdir(parents=True, exist_ok=True)
        quota = max(1000, round(cores * PERIOD_US))
        cpu_dir = self.dirs[0]
        if controller.version == 2:
            (cpu_dir / "cpu.max").write_text(f"{quota} {PERIOD_US}")
        else:
            (cpu_dir / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (cpu_dir / "cpu.cfs_quota_us").write_text(str(quota))
        self._usage_at_start = self._usage_ns()

    def add(self, pid: int) -> bool:
        """Move process ``pid`` into the group (its later children are born there); False when it
        is gone."""
        try:
            for path in self.dirs:
                (path / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:  # ESRCH: the process ended meanwhile
            return False
        return True

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return _procs(self.dirs[0])

    def usage_s(self) -> float:
        """CPU time the group's processes used since the group was made (processes that ended
        included)."""
        return (self._usage_ns() - self._usage_at_start) / 1e9

    def periods(self) -> tuple[int, int]:
        """(accounting periods the group ran in, periods the quota ran out in) so far: their ratio
        is how often the cap held the group back."""
        stat = _stat(self.dirs[0] / "cpu.stat")
        return stat.get("nr_periods", 0), stat.get("nr_throttled", 0)

    def close(self, timeout_s: float = 5.0) -> None:
        """Move what still runs back to the root group and remove the group. A process may be
        born into it meanwhile, or one that ended may not be reaped yet (the kernel refuses to
        remove a group that still counts it): tried again until ``timeout_s``; a group left
        behind is empty, and harmless."""
        roots = list(dict.fromkeys([self.controller.cpu, self.controller.accounting]))
        deadline = time.monotonic() + timeout_s
        for root, path in zip(roots, self.dirs):
            while path.exists():
                for pid in _procs(path):
                    try:
                        (root / "cgroup.procs").write_text(str(pid))
                    except OSError:
                        pass  # ended meanwhile
                try:
                    path.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)

    def _usage_ns(self) -> int:
        if self.controller.version == 2:
            return _stat(self.dirs[0] / "cpu.stat").get("usage_usec", 0) * 1000
        return int((self.dirs[-1] / "cpuacct.usage").read_text())

    def __enter__(self) -> CpuQuota:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _enable_cpu(path: Path) -> None:
    """Let ``path``'s child groups use the cpu controller (cgroup v2)."""
    control = path / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


def _procs(path: Path) -> list[int]:
    try:
        return [int(line) for line in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _stat(path: Path) -> dict[str, int]:
    try:
        return {key: int(value) for key, value in (line.split() for line in path.read_text().splitlines())}
    except (OSError, ValueError):
        return {}
