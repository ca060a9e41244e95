"""The heap backend's snapshot: every state's entries in the canonical format.

Registered states are serialized from their live objects (expired TTL values left out); restored
states not registered yet are carried over as the bytes they were restored from; timer queues
are written in their canonical form (the map states ``_timers.<name>``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from tidemark.state.heap.table import HeapStateTable, RawStateStore
from tidemark.state.heap.timers import HeapTimerQueue
from tidemark.state.snapshot import Entry


def snapshot_entries(tables: Mapping[str, HeapStateTable], raw: Mapping[str, RawStateStore],
                     timers: Mapping[str, HeapTimerQueue], now_ms: int) -> Iterator[Entry]:
    """Canonical entries of ``tables``, ``raw`` then ``timers``, each in name order."""
    for name in sorted(tables):
        yield from tables[name].snapshot_entries(now_ms)
    for name, store in sorted(raw.items()):
        for change in store.changes(name):
            yield Entry(name, change.key_group, change.key, change.namespace,
                        change.user_key, change.value or b"")
    for _, queue in sorted(timers.items()):
        yield from queue.snapshot_entries()
