"""The RocksDB backend's timer queue: timers in a column family of their own, ordered by time
(Flink's RocksDB timer service, ``state.backend.rocksdb.timer-service.factory: ROCKSDB``).

Three column families per backend hold the timers of a queue ``<name>``:

* ``timer-order:<name>``, the time-ordered queue: one empty value per timer under
  ``u16 key group | u64 timestamp + 2**63 | u32 len + stored key | namespace`` (big-endian).
  Adding 2**63 makes byte order the numeric order of signed 64-bit timestamps, negatives
  included, so within each key group the timers lie in (timestamp, key, namespace) order, and a
  key group stays a contiguous range (clipped with ``delete_range`` on restore after a rescale, as
  every state is). Before timers had namespaces this family was ``timers:<name>``, without the
  length and the namespace: a snapshot holding only that one restores by rebuilding this one from
  the per-key index (:func:`rebuild_time_order`), and the old family is dropped;
* ``state:_timers.<name>``, the per-key index: the queue's canonical form, the map state
  ``_timers.<name>`` in the layout of every map state (``key group | key | namespace |
  timestamp`` -> ``True``). A time-ordered family cannot say which timers one key has without
  scanning its key group; this one answers ``timestamps`` with one prefix scan of the key and
  namespace. It
  costs a second write per change, and buys two things besides: canonical snapshots read the
  timers like any map state (no conversion), and incremental snapshots written before timers
  had a queue of their own (which hold only this family) still restore: the time-ordered
  family is then rebuilt from it once (:func:`rebuild_time_order`);
* ``timer-counts``, shared by the queues: ``u16 key group | queue name`` -> u64 count. Counts
  live in memory and are written here before each incremental snapshot, so a restored queue
  knows its size and which key groups hold timers without reading a single timer.

In memory, per key group, only a cache of its first timers in time order (at most
``cache_size``, Flink's ``RocksDBCachingPriorityQueueSet``), and a binary heap of the key groups'
first timers (Flink's ``KeyGroupPartitionedPriorityQueue``). Invariant: a timer of a key group
that is not in its cache comes after every timer in the cache; the cache holds the whole key
group when its length is the key group's count. So the first timer is the head of the heap, a
lookup of a timer at or before the cache's last is answered in memory, and a key group's cache
is read again only when it runs empty while the key group still holds timers (one seek, from
the last timer removed, which skips the tombstones of the ones before it). Creating a queue
reads the counts and one cache per key group holding timers, never every timer.

The heap of heads may hold outdated entries (a key group's first timer changed); they are
dropped when reached, and the heap is rebuilt from the caches when it grows past twice the
number of key groups, so memory stays bounded by the key groups and the cache size.
"""

from __future__ import annotations

import heapq
import struct
from bisect import bisect_left
from typing import TYPE_CHECKING, Any

from tidemark.keygroups import KeyGroupRange, decode_key
from tidemark.protocol.messages import StateChangeOp
from tidemark.state.rocksdb.table import CurrentKeySlot, key_group_bytes, key_prefix, namespace_part, split_db_key
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

if TYPE_CHECKING:
    import rocksdict

TIME_ORDER_CF_PREFIX = "timer-order:"
LEGACY_TIME_ORDER_CF_PREFIX = "timers:"  # before namespaces: dropped once rebuilt (see the module)
COUNTS_CF = "timer-counts"
_TIME_KEY = struct.Struct(">HQ")
_U32 = struct.Struct(">I")
_COUNT = struct.Struct(">Q")
_BIAS = 1 << 63
_HEAD_SLACK = 16


def time_order_cf_name(queue_name: str) -> str:
    return TIME_ORDER_CF_PREFIX + queue_name


def time_key(key_group: int, timestamp: int, stored_key: bytes, namespace: bytes) -> bytes:
    """A timer's key in the time-ordered family (``namespace`` encoded)."""
    return _TIME_KEY.pack(key_group, timestamp + _BIAS) + timer_order(stored_key, namespace)


def split_time_key(db_key: bytes) -> tuple[int, int, bytes, bytes]:
    """``(key group, timestamp, stored key, namespace)`` of a key of the time-ordered family."""
    key_group, biased = _TIME_KEY.unpack_from(db_key)
    (length,) = _U32.unpack_from(db_key, _TIME_KEY.size)
    start = _TIME_KEY.size + 4
    return key_group, biased - _BIAS, db_key[start:start + length], db_key[start + length:]


def count_key(key_group: int, queue_name: str) -> bytes:
    return key_group_bytes(key_group) + queue_name.encode("utf-8")


class RocksDBTimerQueue(TimerQueue):
    """See the module docstring. The families are the backend's; it releases them on close."""

    def __init__(self, backend: CurrentKeySlot, key_groups: KeyGroupRange, name: str,
                 time_order: rocksdict.Rdict, by_key: rocksdict.Rdict, counts: rocksdict.Rdict,
                 cache_size: int) -> None:
        if cache_size < 1:
            raise ValueError(f"the timer cache holds at least one timer per key group, not {cache_size}")
        self._b = backend
        self._name = name
        self._state_name = timer_state_name(name)
        self._start = key_groups.start
        self._time_order = time_order
        self._by_key = by_key
        self._counts_cf = counts
        self._cache_size = cache_size
        size = len(key_groups)
        self._caches: list[list[bytes]] = [[] for _ in range(size)]
        self._counts = [0] * size
        self._dirty: set[int] = set()
        self._heads: list[tuple[int, bytes, int, bytes]] = []
        self._total = 0
        self._load(key_groups)

    def _load(self, key_groups: KeyGroupRange) -> None:
        """The counts, then the cache of every key group holding timers."""
        name = self._name.encode("utf-8")
        for db_key, value in self._counts_cf.items(from_key=key_group_bytes(key_groups.start)):
            key_group = int.from_bytes(db_key[:2], "big")
            if key_group > key_groups.end:
                break
            if db_key[2:] == name:
                count = _COUNT.unpack(value)[0]
                self._counts[key_group - self._start] = count
                self._total += count
        for kgi, count in enumerate(self._counts):
            if count:
                self._refill(kgi, key_group_bytes(self._start + kgi))

    @property
    def name(self) -> str:
        return self._name

    @property
    def cached_timers(self) -> int:
        """How many timers are held in memory (the caches), at most key groups x cache size."""
        return sum(len(cache) for cache in self._caches)

    # ------------------------------------------------------------------ the current key's timers

    def add(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        key_group, stored, encoded = b._key_group, b._stored_key, encode_namespace(namespace)
        if not self._insert(key_group - self._start, time_key(key_group, timestamp, stored, encoded),
                            b._prefix + namespace_part(encoded), timestamp):
            return False
        if b._listeners:
            self._emit(key_group, stored, encoded, timestamp, True)
        return True

    def remove(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        key_group, stored, encoded = b._key_group, b._stored_key, encode_namespace(namespace)
        if not self._delete(key_group - self._start, time_key(key_group, timestamp, stored, encoded),
                            b._prefix + namespace_part(encoded), timestamp):
            return False
        if b._listeners:
            self._emit(key_group, stored, encoded, timestamp, False)
        return True

    def contains(self, timestamp: int, namespace: Any = None) -> bool:
        b = self._b
        kgi = b._key_group - self._start
        return self._find(kgi, time_key(b._key_group, timestamp, b._stored_key, encode_namespace(namespace)))[0]

    def timestamps(self, namespace: Any = None) -> list[int]:
        return sorted(self._timestamps_under(self._b._prefix + namespace_part(encode_namespace(namespace))))

    def _timestamps_under(self, start: bytes) -> list[int]:
        """The timestamps of the per-key index's entries under ``start`` (a key and namespace)."""
        cut = len(start)
        found = []
        for db_key in self._by_key.keys(from_key=start):
            if not db_key.startswith(start):
                break
            found.append(decode_timestamp(db_key[cut:]))
        return found

    # ------------------------------------------------------------------ every key's timers

    def __len__(self) -> int:
        return self._total

    def peek(self) -> Due | None:
        head = self._head()
        if head is None:
            return None
        _, timestamp, stored, namespace = split_time_key(head[3])
        return timestamp, decode_key(stored), decode_namespace(namespace)

    def poll(self, until: int) -> Due | None:
        head = self._head()
        if head is None or head[0] > until:
            return None
        kgi, raw = head[2], head[3]
        key_group, timestamp, stored, namespace = split_time_key(raw)
        self._remove_at(kgi, 0, raw, key_prefix(key_group, stored) + namespace_part(namespace), timestamp)
        if self._b._listeners:
            self._emit(key_group, stored, namespace, timestamp, False)
        return timestamp, decode_key(stored), decode_namespace(namespace)

    # ------------------------------------------------------------------ restore, replay, snapshot

    def apply_change(self, change: KeyedStateChange) -> None:
        key_group, stored, namespace = change.key_group, change.key, change.namespace
        kgi, slot = key_group - self._start, key_prefix(key_group, stored) + namespace_part(namespace)
        if change.op is StateChangeOp.PUT:
            timestamp = decode_timestamp(change.user_key or b"")
            self._insert(kgi, time_key(key_group, timestamp, stored, namespace), slot, timestamp)
        elif change.op is StateChangeOp.DELETE and change.user_key is not None:
            timestamp = decode_timestamp(change.user_key)
            self._delete(kgi, time_key(key_group, timestamp, stored, namespace), slot, timestamp)
        else:
            for timestamp in self._timestamps_under(slot):
                self._delete(kgi, time_key(key_group, timestamp, stored, namespace), slot, timestamp)

    def write_counts(self) -> None:
        """Write the counts changed since the last call into the counts family (before a
        snapshot, so that a restore finds them)."""
        for kgi in sorted(self._dirty):
            key, count = count_key(self._start + kgi, self._name), self._counts[kgi]
            if count:
                self._counts_cf.put(key, _COUNT.pack(count))
            else:
                self._counts_cf.delete(key)
        self._dirty.clear()

    def release(self) -> None:
        """Drop the references to the column families (the backend closes the database)."""
        self._time_order = self._by_key = self._counts_cf = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ internals

    def _find(self, kgi: int, raw: bytes) -> tuple[bool, int]:
        """``(present, index in the cache or -1)`` of a timer of key group ``kgi``."""
        cache = self._caches[kgi]
        if cache and raw <= cache[-1]:
            index = bisect_left(cache, raw)
            return cache[index] == raw, index
        if len(cache) == self._counts[kgi]:  # the cache holds the whole key group
            return False, -1
        return self._time_order.get(raw) is not None, -1

    def _insert(self, kgi: int, raw: bytes, slot: bytes, timestamp: int) -> bool:
        """Add a timer (``slot``: its key and namespace in the per-key index) unless present."""
        cache = self._caches[kgi]
        count = self._counts[kgi]
        whole = len(cache) == count
        if cache and raw <= cache[-1]:
            index = bisect_left(cache, raw)
            if cache[index] == raw:
                return False
        elif whole:
            index = len(cache)
        elif self._time_order.get(raw) is not None:
            return False
        else:
            index = -1  # after the cache's last: stays on disk only
        self._time_order.put(raw, b"")
        self._by_key.put(slot + encode_timestamp(timestamp), TIMER_VALUE)
        self._counts[kgi] = count + 1
        self._dirty.add(kgi)
        self._total += 1
        if index >= 0:
            cache.insert(index, raw)
            if len(cache) > self._cache_size:
                cache.pop()
            if index == 0:
                self._push_head(kgi)
        return True

    def _delete(self, kgi: int, raw: bytes, slot: bytes, timestamp: int) -> bool:
        present, index = self._find(kgi, raw)
        if present:
            self._remove_at(kgi, index, raw, slot, timestamp)
        return present

    def _remove_at(self, kgi: int, index: int, raw: bytes, slot: bytes, timestamp: int) -> None:
        """Remove a present timer (``index``: its place in the cache, -1 if not cached)."""
        self._time_order.delete(raw)
        self._by_key.delete(slot + encode_timestamp(timestamp))
        self._counts[kgi] -= 1
        self._dirty.add(kgi)
        self._total -= 1
        if index >= 0:
            cache = self._caches[kgi]
            del cache[index]
            if not cache and self._counts[kgi]:
                self._refill(kgi, raw)  # every timer left comes after the removed one
            elif cache and index == 0:
                self._push_head(kgi)

    def _refill(self, kgi: int, from_key: bytes) -> None:
        """Read the first timers of key group ``kgi`` at or after ``from_key`` into its (empty) cache."""
        prefix = key_group_bytes(self._start + kgi)
        cache, size = self._caches[kgi], self._cache_size
        for db_key in self._time_order.keys(from_key=from_key):
            if not db_key.startswith(prefix):
                break
            cache.append(db_key)
            if len(cache) == size:
                break
        if cache:
            self._push_head(kgi)
        elif self._counts[kgi]:  # counted timers that are not there: trust the family
            self._total -= self._counts[kgi]
            self._counts[kgi] = 0
            self._dirty.add(kgi)

    def _head_of(self, kgi: int) -> tuple[int, bytes, int, bytes]:
        raw = self._caches[kgi][0]
        return split_time_key(raw)[1], raw[_TIME_KEY.size:], kgi, raw

    def _push_head(self, kgi: int) -> None:
        heads = self._heads
        heapq.heappush(heads, self._head_of(kgi))
        if len(heads) > 2 * len(self._caches) + _HEAD_SLACK:
            self._heads = [self._head_of(i) for i, cache in enumerate(self._caches) if cache]
            heapq.heapify(self._heads)

    def _head(self) -> tuple[int, bytes, int, bytes] | None:
        """The first timer as ``(timestamp, order, key-group index, time key)``; ``order`` is
        :func:`~tidemark.state.timer_queue.timer_order`."""
        heads, caches = self._heads, self._caches
        while heads:
            head = heads[0]
            cache = caches[head[2]]
            if cache and cache[0] == head[3]:
                return head
            heapq.heappop(heads)  # outdated: that key group's first timer changed
        return None

    def _emit(self, key_group: int, stored: bytes, namespace: bytes, timestamp: int, added: bool) -> None:
        change = timer_change(self._state_name, key_group, stored, namespace, timestamp, added)
        for listener in self._b._listeners:
            listener(change)


def rebuild_time_order(name: str, by_key: rocksdict.Rdict, time_order: rocksdict.Rdict,
                       counts: rocksdict.Rdict) -> int:
    """Fill an empty time-ordered family and the counts of queue ``name`` from its per-key index
    (a snapshot written before timers had a family of their own, or before they had namespaces);
    returns how many timers."""
    per_key_group: dict[int, int] = {}
    for db_key in by_key.keys():
        key_group, stored, namespace, user_key = split_db_key(db_key)
        time_order.put(time_key(key_group, decode_timestamp(user_key), stored, namespace), b"")
        per_key_group[key_group] = per_key_group.get(key_group, 0) + 1
    for key_group, count in per_key_group.items():
        counts.put(count_key(key_group, name), _COUNT.pack(count))
    return sum(per_key_group.values())
