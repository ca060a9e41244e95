"""The heap backend's snapshot: every state's entries in the canonical format.

The synchronous part captures (:class:`HeapCapture`, copy-on-write); the asynchronous part
serializes what it captured. Registered states are serialized from their live objects as
captured (expired TTL values left out); restored
states not registered yet are carried over as the bytes they were restored from; timer queues
are written in their canonical form (the map states ``_timers.<name>``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.state.heap.table import HeapStateTable, RawStateStore
from tidemark.state.heap.timers import HeapTimerQueue
from tidemark.state.snapshot import Entry


@dataclass(frozen=True)
class HeapCapture:
    """A heap backend's state as of a snapshot's synchronous part: each table's and timer queue's
    key-group maps (copy-on-write from then on) and a copy of the restored bytes of states not
    registered yet. :meth:`entries` may run on another thread; :meth:`release` once written."""

    tables: list[tuple[HeapStateTable, list[dict[Any, Any]]]]
    raw: list[tuple[str, RawStateStore]]
    timers: list[tuple[HeapTimerQueue, list[dict[Any, Any]]]]
    now_ms: int

    @classmethod
    def take(cls, tables: dict[str, HeapStateTable], raw: dict[str, RawStateStore],
             timers: dict[str, HeapTimerQueue], now_ms: int) -> HeapCapture:
        return cls([(tables[name], tables[name].capture()) for name in sorted(tables)],
                   [(name, raw[name].copy()) for name in sorted(raw)],
                   [(timers[name], timers[name].capture()) for name in sorted(timers)], now_ms)

    def entries(self) -> Iterator[Entry]:
        """Canonical entries of the tables, the restored bytes, then the timers, each in name order."""
        for table, maps in self.tables:
            yield from table.snapshot_entries(maps, self.now_ms)
        for name, store in self.raw:
            for change in store.changes(name):
                yield Entry(name, change.key_group, change.key, change.namespace,
                            change.user_key, change.value or b"")
        for queue, captured in self.timers:
            yield from queue.snapshot_entries(captured)

    def release(self) -> None:
        for table, _ in self.tables:
            table.release()
        for queue, _ in self.timers:
            queue.release()
