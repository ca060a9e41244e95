"""The heap backend's timer queue: every timer in memory (Flink's ``HeapPriorityQueueSet``).

Two structures: per key group, (key, namespace) -> set of timestamps (dedup, ``contains``,
``timestamps``, snapshots), and one binary heap of ``(timestamp, order, key-group index, key,
namespace)`` over all key groups (which timer is due first; ``order`` is
:func:`~tidemark.state.timer_queue.timer_order`). ``remove`` leaves the heap entry behind; ``peek`` and
``poll`` drop entries whose timer is gone, and the heap is rebuilt from the sets once more than
half of it is such leftovers, so memory stays proportional to the live timers. The sets are
copy-on-write while a snapshot's capture is pending (:mod:`tidemark.state.heap.copy_on_write`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from tidemark.keygroups import decode_key, encode_key
from tidemark.state.heap.copy_on_write import KeyGroupMaps
from tidemark.protocol.messages import StateChangeOp
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.snapshot import Entry
from tidemark.state.table import KeyedStateChange, decode_namespace, encode_namespace
from tidemark.state.timer_queue import (
    TIMER_VALUE,
    Due,
    TimerQueue,
    decode_timestamp,
    encode_timestamp,
    timer_change,
    timer_order,
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
        self._cow = KeyGroupMaps(len(backend.key_group_range))
        self._by_key: list[dict[tuple[Any, Any], set[int]]] = self._cow.maps  # read directly; write through _cow
        self._heap: list[tuple[int, bytes, int, Any, Any]] = []
        self._count = 0

    @property
    def name(self) -> str:
        return self._name

    # ------------------------------------------------------------------ the current key's timers

    def add(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        encoded = encode_namespace(namespace)
        if not self._insert(b._kgi, b._key, namespace, b._stored_key, encoded, timestamp):
            return False
        if b._listeners:
            self._emit(b._key_group, b._stored_key, encoded, timestamp, True)
        return True

    def remove(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        if not self._discard(b._kgi, (b._key, namespace), timestamp):
            return False
        if b._listeners:
            self._emit(b._key_group, b._stored_key, encode_namespace(namespace), timestamp, False)
        return True

    def contains(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        timestamps = self._by_key[b._kgi].get((b._key, namespace))
        return timestamps is not None and timestamp in timestamps

    def timestamps(self, namespace: Any = None) -> list[int]:
        b = self._b
        return sorted(self._by_key[b._kgi].get((b._key, namespace), ()))

    # ------------------------------------------------------------------ every key's timers

    def __len__(self) -> int:
        return self._count

    def peek(self) -> Due | None:
        heap, by_key = self._heap, self._by_key
        while heap:
            timestamp, _, kgi, key, namespace = heap[0]
            timestamps = by_key[kgi].get((key, namespace))
            if timestamps is not None and timestamp in timestamps:
                return timestamp, key, namespace
            heapq.heappop(heap)  # removed, or an older entry of a timer added again
        return None

    def poll(self, until: int) -> Due | None:
        head = self.peek()
        if head is None or head[0] > until:
            return None
        timestamp, _, kgi, key, namespace = heapq.heappop(self._heap)
        self._discard(kgi, (key, namespace), timestamp)
        if self._b._listeners:
            self._emit(self._start + kgi, encode_key(key), encode_namespace(namespace), timestamp, False)
        return head

    # ------------------------------------------------------------------ bytes in and out

    def apply_change(self, change: KeyedStateChange) -> None:
        kgi, key, namespace = change.key_group - self._start, decode_key(change.key), decode_namespace(change.namespace)
        if change.op is StateChangeOp.PUT:
            self._insert(kgi, key, namespace, change.key, change.namespace, decode_timestamp(change.user_key or b""))
        elif change.op is StateChangeOp.DELETE and change.user_key is not None:
            self._discard(kgi, (key, namespace), decode_timestamp(change.user_key))
        else:
            for timestamp in list(self._by_key[kgi].get((key, namespace), ())):
                self._discard(kgi, (key, namespace), timestamp)

    def capture(self) -> list[dict[tuple[Any, Any], set[int]]]:
        """The timers as they are now, unchanged until :meth:`release` (a snapshot's synchronous part)."""
        return self._cow.capture()

    def release(self) -> None:
        self._cow.release()

    def snapshot_entries(self, captured: list[dict[tuple[Any, Any], set[int]]]) -> Iterator[Entry]:
        """Every timer of a :meth:`capture` in the canonical form, in key-group order."""
        name = self._state_name
        for kgi, by_key in enumerate(captured):
            for (key, namespace), timestamps in by_key.items():
                stored, encoded = encode_key(key), encode_namespace(namespace)
                for timestamp in sorted(timestamps):
                    yield Entry(name, self._start + kgi, stored, encoded, encode_timestamp(timestamp), TIMER_VALUE)

    # ------------------------------------------------------------------ internals

    def _insert(self, kgi: int, key: Any, namespace: Any, stored: bytes, encoded: bytes, timestamp: int) -> bool:
        slot = (key, namespace)
        timestamps = self._live(kgi, slot).setdefault(slot, set())
        if timestamp in timestamps:
            return False
        timestamps.add(timestamp)
        self._count += 1
        heap = self._heap
        heapq.heappush(heap, (timestamp, timer_order(stored, encoded), kgi, key, namespace))
        if len(heap) > 2 * self._count + _SLACK:
            self._rebuild_heap()
        return True

    def _discard(self, kgi: int, slot: tuple[Any, Any], timestamp: int) -> bool:
        timestamps = self._by_key[kgi].get(slot)
        if timestamps is None or timestamp not in timestamps:
            return False
        by_key = self._live(kgi, slot)
        timestamps = by_key[slot]
        timestamps.discard(timestamp)
        if not timestamps:
            del by_key[slot]
        self._count -= 1
        return True

    def _live(self, kgi: int, slot: tuple[Any, Any]) -> dict[tuple[Any, Any], set[int]]:
        """The live map of key-group index ``kgi`` where the timestamps of ``slot`` may be changed in place."""
        return self._cow.owned(kgi, slot, set) if self._cow.pending else self._by_key[kgi]

    def _rebuild_heap(self) -> None:
        self._heap = [(timestamp, timer_order(encode_key(key), encode_namespace(namespace)), kgi, key, namespace)
                      for kgi, by_key in enumerate(self._by_key)
                      for (key, namespace), timestamps in by_key.items() for timestamp in timestamps]
        heapq.heapify(self._heap)

    def _emit(self, key_group: int, stored: bytes, namespace: bytes, timestamp: int, added: bool) -> None:
        change = timer_change(self._state_name, key_group, stored, namespace, timestamp, added)
        for listener in self._b._listeners:
            listener(change)
