"""Whether a new instance owes its predecessors the singleton lease's grace period.

The grace period (:mod:`tidemark.chassis.singleton`) lets an older instance that is still running
see the newer claim and exit before the new instance acts. It is owed only to an instance that
may still be running. A claim records where its instance runs (:func:`here`: the kernel's boot
id, the pid namespace, the pid and its start time); an instance whose claim was made on this
kernel and in this pid namespace, and whose process is gone (or the pid now names another
process), is provably not running, whatever the host names say. Nothing is concluded about an
instance elsewhere: a Kubernetes pod's predecessor ran in another pid namespace, so a restarted
pod waits the whole grace period, as before.

:func:`grace_owed` walks the earlier claims of the service from the newest back:

* the newest predecessor may be running: the grace period is owed;
* it is provably gone, and claimed at least twice the grace period ago: the instance before it
  (if any) had that long, its commit included, to see its claim and exit; nothing is owed;
* it is provably gone but claimed recently: the instance before it may not have seen that claim
  yet, so the walk goes on to it; the oldest claim kept (compaction drops older ones) ends the
  walk with the grace period owed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tidemark.processes import process_start_time

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, slots=True)
class Whereabouts:
    """Where a process runs, as far as another process on the same kernel can check it."""

    boot_id: str | None
    pid_namespace: str | None
    pid: int
    pid_started: int | None  # clock ticks since boot (``/proc/<pid>/stat``)

    def fields(self) -> dict[str, Any]:
        return {"boot_id": self.boot_id, "pid_namespace": self.pid_namespace, "pid": self.pid,
                "pid_started": self.pid_started}


def here() -> Whereabouts:
    """This process's whereabouts (``None`` parts where the system does not tell them)."""
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as file:
            boot_id: str | None = file.read().strip() or None
    except OSError:
        boot_id = None
    try:
        namespace: str | None = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = None
    pid = os.getpid()
    return Whereabouts(boot_id, namespace, pid, process_start_time(pid))


def provably_gone(claim: Mapping[str, Any], me: Whereabouts,
                  started: Callable[[int], int | None] = process_start_time) -> bool:
    """True when ``claim``'s instance ran on this kernel in this pid namespace and its process no
    longer runs (``started(pid)`` is None or another start time)."""
    pid, pid_started = claim.get("pid"), claim.get("pid_started")
    if me.boot_id is None or me.pid_namespace is None or not isinstance(pid, int) or not isinstance(pid_started, int):
        return False
    if claim.get("boot_id") != me.boot_id or claim.get("pid_namespace") != me.pid_namespace:
        return False
    return started(pid) != pid_started


def grace_owed(earlier: list[Mapping[str, Any]], now_ms: int, grace_ms: int, me: Whereabouts,
               started: Callable[[int], int | None] = process_start_time) -> bool:
    """Whether a new instance waits the grace period before it acts; ``earlier``: the service's
    earlier claims, oldest first (see the module)."""
    for claim in reversed(earlier):
        if not provably_gone(claim, me, started):
            return True
        claimed_at = claim.get("claimed_at")
        if not isinstance(claimed_at, int):
            return True
        if claimed_at + 2 * grace_ms <= now_ms:
            return False
    return True


__all__ = ["Whereabouts", "grace_owed", "here", "provably_gone"]
