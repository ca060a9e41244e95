"""Fault injection for failure tests: a worker kills itself with SIGKILL at a named point.

``TIDEMARK_FAULT="<point>"`` or ``"<point>:<n>"`` makes the process SIGKILL itself the ``n``-th
time (default 1st) it reaches ``point``. Nothing happens when the variable is unset, so the
checks cost one attribute test in production. SIGKILL (not an exception) so that no ``finally``,
flush or atexit hook runs: exactly what a crashed machine or an OOM kill does.

A process may run several stage workers (*lanes*, each on threads of its own); a spec
``"<lane>=<point>[:<n>]"`` counts only the hits of the threads that entered that lane
(:func:`enter_lane`, :func:`lane`), and several specs, comma-separated, arm one process for
several lanes. A spec without a lane counts every hit of the process, whichever thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

POINTS = frozenset({
    "after-batch",  # a micro-batch was processed, before any checkpoint work
    "after-snapshot",  # state files written, the ack not sent
    "after-ack",  # acked (pre-committed), the checkpoint not completed: between pre-commit and commit
    "during-commit",  # sink records produced in the commit transaction, not committed
    "after-commit",  # sink transaction committed, the sink's pending buffers not dropped
    "during-alignment",  # a channel delivered a barrier, others have not
    "after-channel-write",  # a micro-batch's channel records committed
    "after-changelog-write",  # changelog mode: a micro-batch's state changes delivered, no checkpoint yet
    "during-broadcast",  # a broadcast element applied by the worker's first task, not by its others
    "during-timer-firing",  # on_timer ran for a due timer (its state change made), more may follow
    "during-window-firing",  # a window fired (its result emitted, its state changed), more may follow
    "during-session-merge",  # session windows merged (state and timers), the record not yet added
    "during-notification",  # a completed checkpoint: the first task's operator notified, the others not
    "after-notification",  # a completed checkpoint: every task's operator notified, nothing after
})


_LANE = threading.local()


def enter_lane(name: str | None) -> None:
    """This thread's hits count for lane ``name`` from now on (a thread pool's initializer)."""
    _LANE.name = name


def current_lane() -> str | None:
    return getattr(_LANE, "name", None)


@contextlib.contextmanager
def lane(name: str | None) -> Iterator[None]:
    """The hits of this thread inside the block count for lane ``name``."""
    before = current_lane()
    _LANE.name = name
    try:
        yield
    finally:
        _LANE.name = before


@dataclass
class _Armed:
    lane: str | None  # None: any thread of the process
    point: str
    remaining: int


class FaultInjector:
    def __init__(self, spec: str | None) -> None:
        self.configure(spec)

    def configure(self, spec: str | None) -> None:
        """Arm (or, with None, disarm) the injector; a warm standby learns its fault this way."""
        armed: list[_Armed] = []
        for part in (spec or "").split(","):
            if not part.strip():
                continue
            lane_name, _, rest = part.strip().rpartition("=")
            point, _, count = rest.partition(":")
            if point not in POINTS:
                raise ValueError(f"TIDEMARK_FAULT: unknown point {point!r}; expected one of {sorted(POINTS)}")
            armed.append(_Armed(lane_name or None, point, int(count or 1)))
        self._armed = armed
        self._points = frozenset(a.point for a in armed)

    @property
    def point(self) -> str | None:
        """The armed point (the first, when several are)."""
        return self._armed[0].point if self._armed else None

    @property
    def remaining(self) -> int:
        """Hits left before the first armed point kills the process."""
        return self._armed[0].remaining if self._armed else 0

    def _matching(self, point: str) -> _Armed | None:
        if point not in self._points:
            return None
        here = current_lane()
        return next((a for a in self._armed if a.point == point and (a.lane is None or a.lane == here)), None)

    def armed(self, point: str) -> bool:
        """True when this thread's lane of the process is set to die at ``point`` (lets a caller
        prepare the moment)."""
        return self._matching(point) is not None

    def hit(self, point: str) -> None:
        armed = self._matching(point)
        if armed is None:
            return
        armed.remaining -= 1
        if armed.remaining <= 0:
            where = f" in {armed.lane}" if armed.lane else ""
            print(f"tidemark fault injection: SIGKILL at {point}{where}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


FAULTS = FaultInjector(os.environ.get("TIDEMARK_FAULT"))
"""The process-wide injector, configured from the environment at import."""
