"""How big a backend's keyed state is, per state: what the state metrics report
(``tidemark_worker_state_*`` and ``tidemark_worker_rocksdb_*``, :mod:`tidemark.runtime.job.metrics`).

An *entry* is one stored item as a snapshot stores it (:class:`tidemark.state.snapshot.Entry`): a
value, a whole list, or one map entry, for one key and namespace. Each backend measures what it
can without reading its state again:

* heap: the entries counted (each key group's table, and each map's entries for map state); the
  bytes estimated from a sample of the entries serialized as a snapshot would
  (``heap.table.SIZE_SAMPLE``); the changelog backend reports its heap backend's;
* RocksDB: RocksDB's own figures per column family (one per state): its estimate of the keys,
  the live SST files plus the memtables as the bytes, and the compaction still to do; the block
  cache's usage (of the cache the database uses, often shared by all the tasks of a worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tidemark.state.snapshot import Entry


@dataclass(frozen=True, slots=True)
class StateSize:
    """One state of one backend. The RocksDB figures are None on the heap."""

    entries: int
    bytes: int
    live_sst_bytes: int | None = None
    memtable_bytes: int | None = None
    pending_compaction_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class BackendSize:
    """Every registered state of one backend, and the RocksDB block cache's usage (None on the heap)."""

    states: Mapping[str, StateSize] = field(default_factory=dict)
    block_cache_bytes: int | None = None
    block_cache: int = 0  # which cache (an id): backends sharing one report the same usage


def entry_bytes(entry: Entry) -> int:
    """What a snapshot stores of ``entry``, without its framing."""
    return len(entry.key) + len(entry.namespace) + len(entry.user_key or b"") + len(entry.value)
