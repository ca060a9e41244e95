"""Timers of one task, kept as keyed state of its backend (Flink's ``InternalTimerService``).

A timer is a (key, timestamp) in one of two time domains, event time (fires when the watermark
passes it) and processing time (fires when the wall clock does). :class:`TimerService` stores the
timers of each domain as an internal map state of the task's keyed backend
(``_timers.event-time`` / ``_timers.processing-time``: per key, timestamp -> ``True``), so timers
are state like any other:

* they are in every snapshot the backend takes, full, incremental, canonical (savepoints) and
  changelog, and restore with it on any backend;
* a rescale redistributes them by key group with the rest of the keyed state;
* registering the same (key, timestamp) twice keeps one timer.

Which timer is due next comes from an index in memory, a heap ordered by (timestamp, key) per
domain, built from the backend's timer states when the service is created (after a restore) and
kept up to date by ``register``; a deleted timer leaves its heap entry behind, skipped when it is
reached (Flink's HEAP timer factory, the default for its RocksDB backend too).

Lifecycle: ``TimerService(backend)`` after the backend restored (it registers its two states) ->
``register``/``delete`` with the timer's key current in the backend -> ``pop_due`` (each yielded
timer has its key current and is already removed from the state) -> the backend snapshots the
timers with everything else.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.keygroups import encode_key
from tidemark.state.backend import KeyedStateBackend
from tidemark.state.descriptors import MapStateDescriptor

STATE_PREFIX = "_timers."


class TimeDomain(str, enum.Enum):
    EVENT_TIME = "event-time"
    PROCESSING_TIME = "processing-time"


def timer_state_name(domain: TimeDomain) -> str:
    """The internal map state holding a domain's timers."""
    return STATE_PREFIX + domain.value


@dataclass(frozen=True, slots=True)
class Timer:
    """A due timer: its key (current in the backend while it is handled) and timestamp."""

    domain: TimeDomain
    timestamp: int
    key: Any


class TimerService:
    """See the module docstring."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self._backend = backend
        self._states = {d: backend.get_state(MapStateDescriptor(timer_state_name(d))) for d in TimeDomain}
        self._queues: dict[TimeDomain, list[tuple[int, bytes, Any]]] = {d: [] for d in TimeDomain}
        self._counts = {d: 0 for d in TimeDomain}
        self._rebuild()

    def _rebuild(self) -> None:
        """The index from the timer states (after a restore); the current key is put back."""
        backend = self._backend
        current = backend.get_current_key()  # None before any key was set
        for domain, state in self._states.items():
            queue = []
            for key in list(backend.keys(timer_state_name(domain))):
                backend.set_current_key(key)
                encoded = encode_key(key)
                queue.extend((int(timestamp), encoded, key) for timestamp in state.keys())
            heapq.heapify(queue)
            self._queues[domain] = queue
            self._counts[domain] = len(queue)
        if current is not None:
            backend.set_current_key(current)

    # ------------------------------------------------------------------ the current key's timers

    def register(self, domain: TimeDomain, timestamp: int) -> None:
        """A timer for the current key at ``timestamp``; a second one at the same time is the same timer."""
        state = self._states[domain]
        timestamp = int(timestamp)
        if state.contains(timestamp):
            return
        state.put(timestamp, True)
        key = self._backend.get_current_key()
        heapq.heappush(self._queues[domain], (timestamp, encode_key(key), key))
        self._counts[domain] += 1

    def delete(self, domain: TimeDomain, timestamp: int) -> None:
        """Remove the current key's timer at ``timestamp``, if there is one."""
        state = self._states[domain]
        timestamp = int(timestamp)
        if state.contains(timestamp):
            state.remove(timestamp)
            self._counts[domain] -= 1

    def timestamps(self, domain: TimeDomain) -> list[int]:
        """The current key's timers, in time order."""
        return sorted(int(t) for t in self._states[domain].keys())

    # ------------------------------------------------------------------ every key's timers

    def count(self, domain: TimeDomain) -> int:
        return self._counts[domain]

    def next_timestamp(self, domain: TimeDomain) -> int | None:
        """When the earliest timer of the domain is due; None without timers. Entries of deleted
        timers are dropped on the way (the current key may change)."""
        queue, state = self._queues[domain], self._states[domain]
        while queue:
            timestamp, _, key = queue[0]
            self._backend.set_current_key(key)
            if state.contains(timestamp):
                return timestamp
            heapq.heappop(queue)
        return None

    def pop_due(self, domain: TimeDomain, time: int) -> Iterator[Timer]:
        """Every timer of the domain at or before ``time``, in (timestamp, key) order, each
        removed from the state and with its key current when it is yielded. Timers registered
        meanwhile at or before ``time`` are yielded too (a timer may register a due one)."""
        queue, state = self._queues[domain], self._states[domain]
        while queue and queue[0][0] <= time:
            timestamp, _, key = heapq.heappop(queue)
            self._backend.set_current_key(key)
            if not state.contains(timestamp):
                continue  # deleted, or a duplicate entry of one already fired
            state.remove(timestamp)
            self._counts[domain] -= 1
            yield Timer(domain, timestamp, key)
