"""The heap backend's timer queue: every timer in memory (Flink's ``HeapPriorityQueueSet``).

Two structures: per key group, key -> set of timestamps (dedup, ``contains``, ``timestamps``,
snapshots), and one binary heap of ``(timestamp, stored key, key-group index, key)`` over all
key groups (which timer is due first). ``remove`` leaves the heap entry behind; ``peek`` and
``poll`` drop entries whose timer is gone, and the heap is rebuilt from the sets once more than
half of it is such leftovers, so memory stays proportional to the live timers.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from tidemark.keygroups import decode_key, encode_key
from tidemark.protocol.messages import StateChangeOp
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.snapshot import Entry
from tidemark.state.table import KeyedStateChange
from tidemark.state.timer_queue import (
    TIMER_VALUE,
    TimerQueue,
    decode_timestamp,
    encode_timestamp,
    timer_change,
    timer_state_name,
)

_SLACK = 64


class HeapTimerQueue(TimerQueue):
    """See the module docstring."""

    def __init__(self, backend: LocalKeyedStateBackend, name: str) -> None:
        self._b = backend
        self._name = name
        self._state_name = timer_state_name(name)
        self._start = backend.key_group_range.start
        self._by_key: list[dict[Any, set[int]]] = [{} for _ in range(len(backend.key_group_range))]
        self._heap: list[tuple[int, bytes, int, Any]] = []
        self._count = 0

    @property
    def name(self) -> str:
        return self._name

    # ------------------------------------------------------------------ the current key's timers

    def add(self, timestamp: int) -> bool:
        b = self._b
        if not self._insert(b._kgi, b._key, b._stored_key, timestamp):
            return False
        if b._listeners:
            self._emit(b._key_group, b._stored_key, timestamp, True)
        return True

    def remove(self, timestamp: int) -> bool:
        b = self._b
        if not self._discard(b._kgi, b._key, timestamp):
            return False
        if b._listeners:
            self._emit(b._key_group, b._stored_key, timestamp, False)
        return True

    def contains(self, timestamp: int) -> bool:
        b = self._b
        timestamps = self._by_key[b._kgi].get(b._key)
        return timestamps is not None and timestamp in timestamps

    def timestamps(self) -> list[int]:
        b = self._b
        return sorted(self._by_key[b._kgi].get(b._key, ()))

    # ------------------------------------------------------------------ every key's timers

    def __len__(self) -> int:
        return self._count

    def peek(self) -> tuple[int, Any] | None:
        heap, by_key = self._heap, self._by_key
        while heap:
            timestamp, _, kgi, key = heap[0]
            timestamps = by_key[kgi].get(key)
            if timestamps is not None and timestamp in timestamps:
                return timestamp, key
            heapq.heappop(heap)  # removed, or an older entry of a timer added again
        return None

    def poll(self, until: int) -> tuple[int, Any] | None:
        head = self.peek()
        if head is None or head[0] > until:
            return None
        timestamp, stored, kgi, key = heapq.heappop(self._heap)
        self._discard(kgi, key, timestamp)
        if self._b._listeners:
            self._emit(self._start + kgi, stored, timestamp, False)
        return timestamp, key

    # ------------------------------------------------------------------ bytes in and out

    def apply_change(self, change: KeyedStateChange) -> None:
        kgi, key = change.key_group - self._start, decode_key(change.key)
        if change.op is StateChangeOp.PUT:
            self._insert(kgi, key, change.key, decode_timestamp(change.user_key or b""))
        elif change.op is StateChangeOp.DELETE and change.user_key is not None:
            self._discard(kgi, key, decode_timestamp(change.user_key))
        else:
            for timestamp in list(self._by_key[kgi].get(key, ())):
                self._discard(kgi, key, timestamp)

    def snapshot_entries(self) -> Iterator[Entry]:
        """Every timer in the canonical form, in key-group order."""
        name = self._state_name
        for kgi, by_key in enumerate(self._by_key):
            for key, timestamps in by_key.items():
                stored = encode_key(key)
                for timestamp in sorted(timestamps):
                    yield Entry(name, self._start + kgi, stored, b"", encode_timestamp(timestamp), TIMER_VALUE)

    # ------------------------------------------------------------------ internals

    def _insert(self, kgi: int, key: Any, stored: bytes, timestamp: int) -> bool:
        timestamps = self._by_key[kgi].setdefault(key, set())
        if timestamp in timestamps:
            return False
        timestamps.add(timestamp)
        self._count += 1
        heap = self._heap
        heapq.heappush(heap, (timestamp, stored, kgi, key))
        if len(heap) > 2 * self._count + _SLACK:
            self._rebuild_heap()
        return True

    def _discard(self, kgi: int, key: Any, timestamp: int) -> bool:
        by_key = self._by_key[kgi]
        timestamps = by_key.get(key)
        if timestamps is None or timestamp not in timestamps:
            return False
        timestamps.discard(timestamp)
        if not timestamps:
            del by_key[key]
        self._count -= 1
        return True

    def _rebuild_heap(self) -> None:
        self._heap = [(timestamp, encode_key(key), kgi, key)
                      for kgi, by_key in enumerate(self._by_key)
                      for key, timestamps in by_key.items() for timestamp in timestamps]
        heapq.heapify(self._heap)

    def _emit(self, key_group: int, stored: bytes, timestamp: int, added: bool) -> None:
        change = timer_change(self._state_name, key_group, stored, timestamp, added)
        for listener in self._b._listeners:
            listener(change)
