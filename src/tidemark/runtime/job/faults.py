"""Fault injection for failure tests: a worker kills itself with SIGKILL at a named point.

``TIDEMARK_FAULT="<point>"`` or ``"<point>:<n>"`` makes the process SIGKILL itself the ``n``-th
time (default 1st) it reaches ``point``. Nothing happens when the variable is unset, so the
checks cost one dict lookup in production. SIGKILL (not an exception) so that no ``finally``,
flush or atexit hook runs: exactly what a crashed machine or an OOM kill does.
"""

from __future__ import annotations

import os
import signal
import sys

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


class FaultInjector:
    def __init__(self, spec: str | None) -> None:
        self.configure(spec)

    def configure(self, spec: str | None) -> None:
        """Arm (or, with None, disarm) the injector; a warm standby learns its fault this way."""
        self.point: str | None = None
        self.remaining = 0
        if spec:
            point, _, count = spec.partition(":")
            if point not in POINTS:
                raise ValueError(f"TIDEMARK_FAULT: unknown point {point!r}; expected one of {sorted(POINTS)}")
            self.point, self.remaining = point, int(count or 1)

    def armed(self, point: str) -> bool:
        """True when this process is set to die at ``point`` (lets a caller prepare the moment)."""
        return point == self.point

    def hit(self, point: str) -> None:
        if point != self.point:
            return
        self.remaining -= 1
        if self.remaining <= 0:
            print(f"tidemark fault injection: SIGKILL at {point}", file=sys.stderr, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)


FAULTS = FaultInjector(os.environ.get("TIDEMARK_FAULT"))
"""The process-wide injector, configured from the environment at import."""
