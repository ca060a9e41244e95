"""Timers of one task, kept in its keyed backend's timer queues (Flink's ``InternalTimerService``).

A timer is a (key, namespace, timestamp) in one of two time domains, event time (fires when the
watermark passes it) and processing time (fires when the wall clock does). The namespace is
``None`` for a function's own timers and the window for a window's (:mod:`tidemark.windows`). :class:`InternalTimerService` keeps the
timers of each domain in the backend's timer queue of that name
(:class:`~tidemark.state.timer_queue.TimerQueue`, ``backend.timer_queue("event-time")``), so
timers are state like any other:

* they are in every snapshot the backend takes, full, incremental, canonical (savepoints, where
  their form is the map state ``_timers.<domain>``: per key, timestamp -> ``True``) and
  changelog, and restore with it on any backend;
* a rescale redistributes them by key group with the rest of the keyed state;
* registering the same (key, namespace, timestamp) twice keeps one timer.

How a queue stores them is the backend's: the heap keeps every timer in memory; RocksDB keeps
them in a column family of their own, ordered by (key group, timestamp, key), with only the first
few timers of each key group in memory (see :mod:`tidemark.state.rocksdb.timers`). Creating the
service reads nothing: the queues already hold what the backend restored.

Lifecycle: ``InternalTimerService(backend)`` after the backend restored -> ``register``/``delete`` with
the timer's key current in the backend -> ``pop_due`` (each yielded timer has its key current
and is already removed from the queue) -> the backend snapshots the timers with everything else.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.state.backend import KeyedStateBackend
from tidemark.state.timer_queue import MAX_TIMESTAMP, MIN_TIMESTAMP, TimerQueue, check_timestamp
from tidemark.state.timer_queue import timer_state_name as _queue_state_name


class TimeDomain(str, enum.Enum):
    EVENT_TIME = "event-time"
    PROCESSING_TIME = "processing-time"


def timer_state_name(domain: TimeDomain) -> str:
    """The state name of a domain's timers in snapshots and changelogs (``_timers.<domain>``)."""
    return _queue_state_name(domain.value)


@dataclass(frozen=True, slots=True)
class Timer:
    """A due timer: its key (current in the backend while it is handled), timestamp and namespace."""

    domain: TimeDomain
    timestamp: int
    key: Any
    namespace: Any = None


class InternalTimerService:
    """See the module docstring."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend
        self._queues: dict[TimeDomain, TimerQueue] = {d: backend.timer_queue(d.value) for d in TimeDomain}

    # ------------------------------------------------------------------ the current key's timers

    def register(self, domain: TimeDomain, timestamp: int, namespace: Any = None) -> None:
        """A timer for the current key in ``namespace`` at ``timestamp`` (a signed 64-bit
        integer); a second one at the same time is the same timer."""
        self._queues[domain].add(check_timestamp(int(timestamp)), namespace)

    def delete(self, domain: TimeDomain, timestamp: int, namespace: Any = None) -> None:
        """Remove the current key's timer in ``namespace`` at ``timestamp``, if there is one."""
        timestamp = int(timestamp)
        if MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:  # no timer can be outside
            self._queues[domain].remove(timestamp, namespace)

    def timestamps(self, domain: TimeDomain, namespace: Any = None) -> list[int]:
        """The current key's timers in ``namespace``, in time order."""
        return self._queues[domain].timestamps(namespace)

    # ------------------------------------------------------------------ every key's timers

    def count(self, domain: TimeDomain) -> int:
        return len(self._queues[domain])

    def next_timestamp(self, domain: TimeDomain) -> int | None:
        """When the earliest timer of the domain is due; None without timers."""
        head = self._queues[domain].peek()
        return None if head is None else head[0]

    def pop_due(self, domain: TimeDomain, time: int) -> Iterator[Timer]:
        """Every timer of the domain at or before ``time``, in (timestamp, key, namespace) order,
        each removed from the queue and with its key current when it is yielded. Timers registered
        meanwhile at or before ``time`` are yielded too (a timer may register a due one)."""
        queue, set_current_key = self._queues[domain], self._backend.set_current_key
        while (due := queue.poll(time)) is not None:
            timestamp, key, namespace = due
            set_current_key(key)
            yield Timer(domain, timestamp, key, namespace)
