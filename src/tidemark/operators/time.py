"""Time as operators see it: the clocks a worker's tasks share (:class:`StageTime`) and each
task's timers (:class:`TimerServiceManager`, Flink's ``InternalTimeServiceManager``).

The worker moves :attr:`StageTime.watermark` (its stage clock, :mod:`tidemark.runtime.worker.clock`)
and reads the timers registered and fired since it last counted them; a task's
:class:`TimerServiceManager` keeps the timers in its keyed backend
(:class:`tidemark.state.timers.InternalTimerService`), pops the due ones for its operators and
gives a user function its :class:`~tidemark.api.TimerService` (:meth:`TimerServiceManager.for_function`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tidemark.clock import now_ms
from tidemark.api import NO_WATERMARK
from tidemark.state import KeyedStateBackend
from tidemark.state.timers import InternalTimerService, TimeDomain, Timer


@dataclass
class StageTime:
    """The clocks a worker's tasks share: the stage's watermark (the worker moves it) and the
    wall clock; and the timers registered and fired since the worker last counted them."""

    watermark: int = NO_WATERMARK
    clock: Callable[[], int] = now_ms
    registered: Counter[TimeDomain] = field(default_factory=Counter)
    fired: Counter[TimeDomain] = field(default_factory=Counter)


class TimerServiceManager:
    """One task's timers, in its keyed backend (created after the backend restored)."""

    def __init__(self, backend: KeyedStateBackend, time: StageTime) -> None:
        self.service = InternalTimerService(backend)
        self.time = time

    def register(self, domain: TimeDomain, timestamp_ms: int, namespace: Any = None) -> None:
        """A timer of the current key in ``namespace`` (counted once however often it is registered)."""
        before = self.service.count(domain)
        self.service.register(domain, timestamp_ms, namespace)
        self.time.registered[domain] += self.service.count(domain) - before

    def delete(self, domain: TimeDomain, timestamp_ms: int, namespace: Any = None) -> None:
        self.service.delete(domain, timestamp_ms, namespace)

    def due(self, domain: TimeDomain, time_ms: int) -> bool:
        """True when a timer of ``domain`` is due at ``time_ms``."""
        upcoming = self.service.next_timestamp(domain)
        return upcoming is not None and upcoming <= time_ms

    def pop_due(self, domain: TimeDomain, time_ms: int) -> Iterator[Timer]:
        """Every timer of ``domain`` due at ``time_ms``, in time order, each with its key current and
        already removed from state; counted as fired."""
        for timer in self.service.pop_due(domain, time_ms):
            self.time.fired[domain] += 1
            yield timer

    def pending(self, domain: TimeDomain) -> int:
        return self.service.count(domain)

    def timestamps(self, domain: TimeDomain, namespace: Any = None) -> list[int]:
        """The current key's timers of ``domain`` in ``namespace``, in time order."""
        return self.service.timestamps(domain, namespace)

    def for_function(self) -> FunctionTimers:
        return FunctionTimers(self)


class FunctionTimers:
    """The :class:`~tidemark.api.TimerService` a function sees: its task's timers of the
    current key, and the stage's clocks."""

    __slots__ = ("_manager", "_time")

    def __init__(self, manager: TimerServiceManager) -> None:
        self._manager = manager
        self._time = manager.time

    def register_event_time_timer(self, timestamp_ms: int) -> None:
        self._manager.register(TimeDomain.EVENT_TIME, timestamp_ms)

    def register_processing_time_timer(self, timestamp_ms: int) -> None:
        self._manager.register(TimeDomain.PROCESSING_TIME, timestamp_ms)

    def delete_event_time_timer(self, timestamp_ms: int) -> None:
        self._manager.delete(TimeDomain.EVENT_TIME, timestamp_ms)

    def delete_processing_time_timer(self, timestamp_ms: int) -> None:
        self._manager.delete(TimeDomain.PROCESSING_TIME, timestamp_ms)

    def current_watermark(self) -> int:
        return self._time.watermark

    def current_processing_time(self) -> int:
        return self._time.clock()
