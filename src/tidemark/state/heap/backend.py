"""HashMapStateBackend: keyed state as Python objects in memory (Flink's HashMapStateBackend).

Snapshots are always full, in the canonical format, asynchronous: the synchronous part captures
the tables copy-on-write (:mod:`tidemark.state.heap.copy_on_write`), the asynchronous part
serializes and writes them. Restored state stays as bytes until its
descriptor is registered (the serializers are needed to decode it); such not-yet-registered
state is carried over unchanged into later snapshots. Timers are in heap timer queues
(every timer in memory), restored and snapshotted in their canonical form.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateChangeOp
from tidemark.state.backend import KeyedSnapshot
from tidemark.state.descriptors import StateDescriptor
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.heap.snapshot import HeapCapture
from tidemark.state.sizes import BackendSize
from tidemark.state.heap.table import HeapStateTable, RawStateStore
from tidemark.state.heap.timers import HeapTimerQueue
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.restore import handle_key_groups, read_handle
from tidemark.state.schema_evolution import Migration
from tidemark.state.snapshot import Entry
from tidemark.state.table import KeyedStateChange
from tidemark.state.ttl import Clock
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId


class HashMapStateBackend(LocalKeyedStateBackend):
    """Keyed state on the Python heap; see :class:`KeyedStateBackend` for the lifecycle."""

    def __init__(
        self,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        *,
        operator_id: str = "operator",
        clock: Clock | None = None,
    ) -> None:
        super().__init__(key_group_range, max_parallelism, operator_id=operator_id, clock=clock)
        self._tables: dict[str, HeapStateTable] = {}
        self._raw: dict[str, RawStateStore] = {}
        self._heap_timers: dict[str, HeapTimerQueue] = {}
        self._cleanup_cursor: Iterator[tuple[HeapStateTable, int, Any]] | None = None

    def _create_table(self, descriptor: StateDescriptor) -> HeapStateTable:
        table = HeapStateTable(self, descriptor)
        raw = self._raw.pop(descriptor.name, None)
        if raw is not None:
            for change in raw.changes(descriptor.name):
                table.apply(change)
        self._tables[descriptor.name] = table
        return table

    def _create_timer_queue(self, name: str) -> HeapTimerQueue:
        queue = self._heap_timers[name] = HeapTimerQueue(self, name)
        return queue

    def _table_of(self, state_name: str) -> HeapStateTable:
        return self._tables[state_name]

    def _apply_change(self, change: KeyedStateChange) -> None:
        table = self._tables.get(change.state_name)
        queue = None if table is not None else self._timer_queue_of(change)
        if queue is not None:
            queue.apply_change(change)
        elif table is not None:
            table.apply(change)
        else:
            self._raw.setdefault(change.state_name, RawStateStore()).apply(change)

    def _migrate_stored(self, name: str, migrate: Migration) -> int:
        raw, count = self._raw.get(name), 0
        for values in (raw.slots.values() if raw is not None else ()):
            for user_key, value in values.items():
                values[user_key] = migrate(value)
                count += 1
        return count

    def cleanup_expired_state(self, limit: int | None = None) -> int:
        """Remove expired TTL values: every one now (``limit`` None), or, as Flink's incremental
        heap cleanup, in the next ``limit`` stored slots from where the last call stopped, a
        new pass starting once one has gone over every table."""
        now = self.clock.now_ms()
        if limit is None:
            return sum(table.cleanup_expired(now) for table in self._tables.values())
        if self._cleanup_cursor is None:
            self._cleanup_cursor = ((table, index, slot) for table in list(self._tables.values())
                                    for index, slot in table.expirable_slots())
        changed = checked = 0
        for table, index, slot in self._cleanup_cursor:
            changed += table.cleanup_slot(index, slot, now)
            checked += 1
            if checked >= limit:
                return changed
        self._cleanup_cursor = None  # the pass ended: the next call starts another
        return changed

    def snapshot_async(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *,
                       canonical: bool = False) -> AsyncSnapshot[KeyedSnapshot]:
        """A full snapshot in the canonical format (one file), whatever ``canonical`` says:
        every heap snapshot is canonical. The synchronous part captures the tables and timers
        copy-on-write (no copy now); the asynchronous part serializes and writes them."""
        self._check_open()
        header, metas = self._header(checkpoint_id, "heap"), self._state_metas()
        capture = HeapCapture.take(self._tables, self._raw, self._heap_timers, self.clock.now_ms())
        return AsyncSnapshot(lambda: self._full_snapshot(checkpoint_id, storage, header, metas, capture.entries()),
                             capture.release)

    def canonical_state(self) -> tuple[list[dict[str, Any]], Iterator[Entry]]:
        self._check_open()
        capture = HeapCapture.take(self._tables, self._raw, self._heap_timers, self.clock.now_ms())

        def entries() -> Iterator[Entry]:
            try:
                yield from capture.entries()
            finally:
                capture.release()

        return self._state_metas(), entries()

    def size(self) -> BackendSize:
        """Counted entries, estimated bytes (:mod:`tidemark.state.sizes`)."""
        self._check_open()
        return BackendSize({name: table.size() for name, table in self._tables.items()})

    def restore(self, snapshots: Sequence[KeyedSnapshot], storage: CheckpointStorage) -> None:
        """Load our key groups from the canonical or incremental handles of any old ranges;
        changelog ranges are ignored (the changelog backend replays them)."""
        for handle in self._handles_to_restore(snapshots):
            key_groups = (handle_key_groups(handle).intersection(self.key_group_range),)
            for part in read_handle(handle, storage, self.key_group_range):
                self._merge_metas(part.states, part.source, key_groups)
                for e in part.entries:
                    change = KeyedStateChange(e.state_name, e.key_group, e.key, e.namespace,
                                              StateChangeOp.PUT, e.user_key, e.value)
                    self._apply_change(self._forwarded(change) if self._evolving else change)

    def _close(self) -> None:
        self._tables.clear()
        self._raw.clear()
        self._heap_timers.clear()
