"""Windows: what a window assigner puts a record in, and the namespace of its state and timers.

A :class:`TimeWindow` is the half-open interval ``[start, end)`` of milliseconds; its last
millisecond, :attr:`TimeWindow.max_timestamp` (``end - 1``), is when an event-time window fires.
The :class:`GlobalWindow` holds every record of a key, forever (its end is the largest
timestamp). Both are tuples, so a window *is* the namespace of its key's state and timers
(``state.handles``, ``state.timer_queue``): ``(start, end)`` and ``()`` in every snapshot,
changelog and savepoint, and back as windows through :func:`window_of`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from tidemark.state.timer_queue import MAX_TIMESTAMP


class TimeWindow(NamedTuple):
    """The milliseconds ``start`` (inclusive) to ``end`` (exclusive)."""

    start: int
    end: int

    @property
    def max_timestamp(self) -> int:
        """The window's last millisecond: an event-time window fires when the watermark reaches it."""
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """True when the two windows overlap or touch (sessions that would merge)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window holding both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


class GlobalWindow(NamedTuple):
    """The one window of :class:`~tidemark.windows.assigners.GlobalWindows`: every record of a key."""

    @property
    def max_timestamp(self) -> int:
        return MAX_TIMESTAMP

    def __repr__(self) -> str:
        return "GlobalWindow()"


Window = TimeWindow | GlobalWindow


def window_of(namespace: Any) -> Window:
    """The window of a namespace as a restore or a timer gives it back (a plain tuple)."""
    if isinstance(namespace, (TimeWindow, GlobalWindow)):
        return namespace
    if namespace == ():
        return GlobalWindow()
    start, end = namespace
    return TimeWindow(start, end)
