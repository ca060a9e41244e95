"""When each task is materialized next: the interval, a per-task jitter and a failure budget.

Pure (the caller passes the time). Lifecycle: ``due(keys, now_ms)`` each tick with the tasks that
have something to materialize; the first time a task appears its first materialization is set
one interval (plus jitter) after ``since_ms`` (its last materialization, or now); after each
attempt ``succeeded`` or ``failed``; ``forget`` a task that went away.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tidemark.materializer.materializer_ledger import TaskKey
from tidemark.materializer.options import MaterializationOptions


@dataclass(slots=True)
class _TaskTimer:
    next_due_ms: int
    failures: int = 0


class MaterializationSchedule:
    """Next due time and consecutive failures per task."""

    def __init__(self, options: MaterializationOptions, rng: random.Random | None = None) -> None:
        self.options = options
        self._rng = rng or random.Random()
        self._timers: dict[TaskKey, _TaskTimer] = {}

    def _delay(self) -> int:
        jitter = self.options.jitter_ms
        return self.options.interval_ms + (self._rng.randrange(jitter) if jitter else 0)

    def due(self, keys: Iterable[TaskKey], now_ms: int,
            since_ms: Callable[[TaskKey], int | None] = lambda key: None) -> list[TaskKey]:
        """The tasks among ``keys`` whose time has come, most overdue first."""
        ready = []
        for key in keys:
            timer = self._timers.get(key)
            if timer is None:
                start = since_ms(key)
                timer = self._timers[key] = _TaskTimer((now_ms if start is None else start) + self._delay())
            if timer.next_due_ms <= now_ms:
                ready.append((timer.next_due_ms, key))
        return [key for _, key in sorted(ready)]

    def succeeded(self, key: TaskKey, now_ms: int) -> None:
        self._timers[key] = _TaskTimer(now_ms + self._delay())

    def failed(self, key: TaskKey, now_ms: int) -> bool:
        """Count a failure; True once the budget is spent (the task now backs off)."""
        timer = self._timers.setdefault(key, _TaskTimer(now_ms))
        timer.failures += 1
        over = timer.failures - self.options.failure_budget
        if over < 0:
            timer.next_due_ms = now_ms + self._delay()
            return False
        backoff = self.options.interval_ms * (2 ** min(over + 1, 30))
        timer.next_due_ms = now_ms + min(self.options.max_backoff_ms, backoff)
        return True

    def failures(self, key: TaskKey) -> int:
        timer = self._timers.get(key)
        return 0 if timer is None else timer.failures

    def next_due(self, key: TaskKey) -> int | None:
        timer = self._timers.get(key)
        return None if timer is None else timer.next_due_ms

    def forget(self, key: TaskKey) -> None:
        self._timers.pop(key, None)
