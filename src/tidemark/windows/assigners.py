"""Window assigners: which windows a record belongs to (Flink's ``WindowAssigner``).

=============================================  =================================================================
assigner                                       windows of a record at time ``t``
=============================================  =================================================================
``TumblingWindows(size_ms, offset_ms=0)``      the one ``[s, s + size)`` with ``s = t - (t - offset) % size``
``SlidingWindows(size_ms, slide_ms, ...)``     every ``[s, s + size)`` holding ``t``, ``s`` a multiple of the slide
                                               (plus offset): ``size / slide`` windows
``SessionWindows(gap_ms=...)``                 ``[t, t + gap)``, merged with every window of the key it touches
``SessionWindows(gap=lambda value: ms)``       the same with a gap computed per record
``GlobalWindows()``                            the one :class:`GlobalWindow` (needs a trigger: it never ends)
=============================================  =================================================================

``t`` is the record's event time, or with ``processing_time=True`` the worker's wall clock when
the record is processed (the window then fires on the wall clock, records are never late). Each
assigner names its default trigger (:mod:`tidemark.windows.triggers`): the end of the window in
its time domain.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from tidemark.windows.triggers import EventTimeTrigger, ProcessingTimeTrigger, Trigger
from tidemark.windows.window import GlobalWindow, TimeWindow, Window

MergeCallback = Callable[[TimeWindow, list[TimeWindow]], None]
"""Called by :meth:`WindowAssigner.merge_windows` with a merged window and the windows it covers."""


class WindowAssigner(ABC):
    """See the module. ``processing_time``: windows of the wall clock, not of event time."""

    processing_time: bool = False

    @abstractmethod
    def assign_windows(self, value: Any, timestamp_ms: int) -> list[Window]:
        """The windows of a record at ``timestamp_ms`` (its event time, or the processing time)."""

    def default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger() if self.processing_time else EventTimeTrigger()

    @property
    def is_event_time(self) -> bool:
        return not self.processing_time

    @property
    def merging(self) -> bool:
        """True when windows of one key merge (sessions)."""
        return False

    def merge_windows(self, windows: list[TimeWindow], merged: MergeCallback) -> None:
        """Call ``merged(cover, covered)`` for each group of ``windows`` that merges into one."""
        raise NotImplementedError(f"{type(self).__name__} windows do not merge")


def _positive(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive number of milliseconds, got {value!r}")
    return value


def window_start(timestamp_ms: int, offset_ms: int, size_ms: int) -> int:
    """The start of the window of ``size_ms`` (aligned to ``offset_ms``) holding ``timestamp_ms``;
    negative timestamps included."""
    return timestamp_ms - (timestamp_ms - offset_ms) % size_ms


class TumblingWindows(WindowAssigner):
    """Windows of ``size_ms`` one after the other, aligned to the epoch plus ``offset_ms``."""

    def __init__(self, size_ms: int, offset_ms: int = 0, *, processing_time: bool = False) -> None:
        self.size_ms = _positive("size_ms", size_ms)
        if not 0 <= offset_ms < size_ms:
            raise ValueError(f"offset_ms must be in [0, size_ms), got {offset_ms}")
        self.offset_ms = offset_ms
        self.processing_time = processing_time
        self._last: list[Window] = [TimeWindow(0, 0)]  # the last answer: records in a row share windows

    def assign_windows(self, value: Any, timestamp_ms: int) -> list[Window]:
        last = self._last
        if last[0].start <= timestamp_ms < last[0].end:
            return last  # the same objects: state and timers find the window's encoding cached
        start = window_start(timestamp_ms, self.offset_ms, self.size_ms)
        self._last = last = [TimeWindow(start, start + self.size_ms)]
        return last

    def __repr__(self) -> str:
        return f"TumblingWindows(size_ms={self.size_ms}, offset_ms={self.offset_ms}, " \
               f"processing_time={self.processing_time})"


class SlidingWindows(WindowAssigner):
    """Windows of ``size_ms`` starting every ``slide_ms`` (a record is in ``size / slide`` of them)."""

    def __init__(self, size_ms: int, slide_ms: int, offset_ms: int = 0, *, processing_time: bool = False) -> None:
        self.size_ms = _positive("size_ms", size_ms)
        self.slide_ms = _positive("slide_ms", slide_ms)
        if slide_ms > size_ms:
            raise ValueError(f"slide_ms ({slide_ms}) must not exceed size_ms ({size_ms}): records between "
                             f"windows would belong to none")
        if not 0 <= offset_ms < slide_ms:
            raise ValueError(f"offset_ms must be in [0, slide_ms), got {offset_ms}")
        self.offset_ms = offset_ms
        self.processing_time = processing_time
        self._last: tuple[int, list[Window]] = (0, [])  # the last answer, by its last window's start
        self._reuse = size_ms % slide_ms == 0  # then every record of one slide has the same windows

    def assign_windows(self, value: Any, timestamp_ms: int) -> list[Window]:
        size, slide = self.size_ms, self.slide_ms
        last = window_start(timestamp_ms, self.offset_ms, slide)
        if self._reuse and self._last[0] == last and self._last[1]:
            return self._last[1]  # the same objects (see TumblingWindows)
        windows: list[Window] = [TimeWindow(start, start + size) for start in range(last, timestamp_ms - size, -slide)]
        self._last = (last, windows)
        return windows

    def __repr__(self) -> str:
        return f"SlidingWindows(size_ms={self.size_ms}, slide_ms={self.slide_ms}, offset_ms={self.offset_ms}, " \
               f"processing_time={self.processing_time})"


class SessionWindows(WindowAssigner):
    """Sessions: a record opens ``[t, t + gap)``; windows of a key that touch merge into one, so a
    session ends after ``gap`` without records of its key. ``gap_ms``: the same gap for every
    record; ``gap``: a function of the record's value giving its gap in milliseconds."""

    def __init__(self, gap_ms: int | None = None, *, gap: Callable[[Any], int] | None = None,
                 processing_time: bool = False) -> None:
        if (gap_ms is None) == (gap is None):
            raise ValueError("SessionWindows takes gap_ms (a fixed gap) or gap (a function of the record), one of them")
        self.gap_ms = None if gap_ms is None else _positive("gap_ms", gap_ms)
        self.gap = gap
        self.processing_time = processing_time

    def assign_windows(self, value: Any, timestamp_ms: int) -> list[Window]:
        gap = self.gap_ms if self.gap is None else self.gap(value)
        if not isinstance(gap, int) or isinstance(gap, bool) or gap <= 0:
            raise ValueError(f"a session gap must be a positive number of milliseconds, the gap function gave {gap!r}")
        return [TimeWindow(timestamp_ms, timestamp_ms + gap)]

    @property
    def merging(self) -> bool:
        return True

    def merge_windows(self, windows: list[TimeWindow], merged: MergeCallback) -> None:
        """Flink's ``TimeWindow.mergeWindows``: sorted by start, each run of windows that touch
        becomes their cover."""
        groups: list[tuple[TimeWindow, list[TimeWindow]]] = []
        for window in sorted(windows):
            if groups and groups[-1][0].intersects(window):
                cover, members = groups[-1]
                groups[-1] = (cover.cover(window), [*members, window])
            else:
                groups.append((window, [window]))
        for cover, members in groups:
            if len(members) > 1:
                merged(cover, members)

    def __repr__(self) -> str:
        gap = self.gap_ms if self.gap is None else self.gap
        return f"SessionWindows(gap={gap!r}, processing_time={self.processing_time})"


class GlobalWindows(WindowAssigner):
    """One window per key holding all its records; it fires only as its trigger says (a count, a
    continuous trigger...), and its state is never cleaned up but by a purging trigger."""

    def assign_windows(self, value: Any, timestamp_ms: int) -> list[Window]:
        return [GlobalWindow()]

    def default_trigger(self) -> Trigger:
        raise ValueError("GlobalWindows never end, so they fire only through a trigger: pass trigger= "
                         "(CountTrigger, ContinuousEventTimeTrigger, ...)")

    @property
    def is_event_time(self) -> bool:
        return False  # no end in event time: its records are never late

    def __repr__(self) -> str:
        return "GlobalWindows()"
