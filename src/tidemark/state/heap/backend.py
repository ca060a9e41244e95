"""HashMapStateBackend: keyed state as Python objects in memory (Flink's HashMapStateBackend).

Snapshots are always full, in the canonical format. Restored state stays as bytes until its
descriptor is registered (the serializers are needed to decode it); such not-yet-registered
state is carried over unchanged into later snapshots.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from tidemark.protocol.messages import StateChangeOp, StateHandle, StateHandleKind
from tidemark.state.backend import KeyedStateBackend, StateRegistrationError
from tidemark.state.descriptors import StateDescriptor
from tidemark.state.heap.table import HeapStateTable
from tidemark.keygroups import KeyGroupRange
from tidemark.state.restore import overlapping, read_handle
from tidemark.state.serializers import frame_element
from tidemark.state.snapshot import Entry, write_snapshot
from tidemark.state.table import KeyedStateChange
from tidemark.state.ttl import Clock
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, KeyGroup

_Slot = tuple[int, bytes, bytes]  # key group, stored key, namespace


class RawStateStore:
    """Byte-level state of one not-yet-registered state: slot -> user key (or None) -> bytes."""

    def __init__(self) -> None:
        self.slots: dict[_Slot, dict[bytes | None, bytes]] = {}

    def apply(self, change: KeyedStateChange) -> None:
        slot = (change.key_group, change.key, change.namespace)
        op = change.op
        if op is StateChangeOp.PUT:
            self.slots.setdefault(slot, {})[change.user_key] = change.value or b""
        elif op is StateChangeOp.ADD:
            values = self.slots.setdefault(slot, {})
            values[None] = values.get(None, b"") + frame_element(change.value or b"")
        elif op is StateChangeOp.CLEAR or change.user_key is None:
            self.slots.pop(slot, None)
        else:
            values = self.slots.get(slot, {})
            values.pop(change.user_key, None)
            if not values:
                self.slots.pop(slot, None)

    def changes(self, name: str) -> Iterator[KeyedStateChange]:
        for (key_group, key, ns), values in self.slots.items():
            for user_key, value in values.items():
                yield KeyedStateChange(name, key_group, key, ns, StateChangeOp.PUT, user_key, value)


class HashMapStateBackend(KeyedStateBackend):
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

    def _create_table(self, descriptor: StateDescriptor) -> HeapStateTable:
        table = HeapStateTable(self, descriptor)
        raw = self._raw.pop(descriptor.name, None)
        if raw is not None:
            for change in raw.changes(descriptor.name):
                table.apply(change)
        self._tables[descriptor.name] = table
        return table

    def _apply_change(self, change: KeyedStateChange) -> None:
        table = self._tables.get(change.state_name)
        if table is not None:
            table.apply(change)
        else:
            self._raw.setdefault(change.state_name, RawStateStore()).apply(change)

    def cleanup_expired_state(self) -> int:
        """Remove every expired TTL value now (Flink's incremental heap cleanup, all at once)."""
        now = self.clock.now_ms()
        return sum(table.cleanup_expired(now) for table in self._tables.values())

    def _entries(self) -> Iterator[Entry]:
        now = self.clock.now_ms()
        for name in sorted(self._tables):
            yield from self._tables[name].snapshot_entries(now)
        for name, raw in sorted(self._raw.items()):
            for change in raw.changes(name):
                yield Entry(name, change.key_group, change.key, change.namespace,
                            change.user_key, change.value or b"")

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage) -> list[StateHandle]:
        """A full snapshot in the canonical format (one file)."""
        self._check_open()
        header = {
            "checkpoint_id": int(checkpoint_id),
            "max_parallelism": self.max_parallelism,
            "key_group_start": self.key_group_range.start,
            "key_group_end": self.key_group_range.end,
            "backend": "heap",
        }
        data = write_snapshot(header, self._state_metas(), self._entries())
        ref = storage.write_bytes(self._snapshot_path(int(checkpoint_id), ".tmks"), data)
        return [
            StateHandle(
                kind=StateHandleKind.KEYED_FULL,
                operator_id=self.operator_id,
                key_group_start=KeyGroup(self.key_group_range.start),
                key_group_end=KeyGroup(self.key_group_range.end),
                files=(ref,),
                state_size_bytes=ref.size_bytes,
                checkpointed_size_bytes=ref.size_bytes,
            )
        ]

    def restore(self, handles: Sequence[StateHandle], storage: CheckpointStorage) -> None:
        """Load our key groups from canonical or incremental handles of any old ranges."""
        self._check_open()
        if self._states:
            raise StateRegistrationError("restore must happen before any state is registered")
        for handle in overlapping(handles, self.key_group_range):
            for part in read_handle(handle, storage, self.key_group_range):
                self._merge_metas(part.states, part.source)
                for e in part.entries:
                    self._apply_change(KeyedStateChange(
                        e.state_name, e.key_group, e.key, e.namespace,
                        StateChangeOp.PUT, e.user_key, e.value))

    def _close(self) -> None:
        self._tables.clear()
        self._raw.clear()
