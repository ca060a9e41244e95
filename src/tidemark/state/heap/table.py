"""Heap state tables: live Python objects per key group, serialized only when observed; and
the bytes of restored states not registered yet."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
from typing import Any, Iterator

from tidemark.protocol.messages import StateChangeOp
from tidemark.state.heap.copy_on_write import KeyGroupMaps, may_change
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.descriptors import (
    StateDescriptor,
    StateKind,
    user_key_serializer_of,
    value_serializer_of,
)
from tidemark.keygroups import decode_key, encode_key
from tidemark.state.serializers import (
    Serializer,
    TaggedSerializer,
    frame_element,
    frame_elements,
    unframe_elements,
)
from tidemark.state.sizes import StateSize, entry_bytes
from tidemark.state.snapshot import Entry
from tidemark.state.table import MISSING, KeyedStateChange, decode_namespace, encode_namespace
from tidemark.state.ttl import TtlSerializer, is_expired, timestamp_of

SIZE_SAMPLE = 64  # entries serialized to estimate a state's bytes (HeapStateTable.size)
PUT, ADD, DELETE, CLEAR = StateChangeOp.PUT, StateChangeOp.ADD, StateChangeOp.DELETE, StateChangeOp.CLEAR
# what the default serializer encodes whatever the value (no need to try it at each write)
_ALWAYS_ENCODED = frozenset({int, float, str, bytes, bool, type(None), dt.datetime, dt.date, decimal.Decimal})


class HeapStateTable:
    """One state: ``maps[key_group - start][(key, namespace)]`` -> stored value.

    Stored values are the objects the handles pass in (lists for list state, a dict of user
    key -> stored value for map state). Objects are not copied: do not mutate a value after
    writing it, as with Flink's heap backend. A value (or user key) its serializer cannot encode
    is refused at the write with the serializer's error, as RocksDB refuses it, not at the next
    snapshot (which would then fail at every checkpoint): the default serializer's scalars are
    taken as they are, anything else is encoded once and the bytes dropped. While a snapshot's capture is pending
    (:meth:`capture`), the maps are copy-on-write (:mod:`tidemark.state.heap.copy_on_write`):
    a read of a list, a map or a mutable value gets a copy, so what the capture holds stays as
    it was.
    """

    __slots__ = ("_b", "name", "kind", "_cow", "_maps", "_ser", "_uks", "_is_map", "_is_list", "_ttl_ms",
                 "_last_namespace", "_tagged", "_uks_tagged")

    def __init__(self, backend: LocalKeyedStateBackend, descriptor: StateDescriptor) -> None:
        self._b = backend
        self.name = descriptor.name
        self.kind = descriptor.kind
        self._cow = KeyGroupMaps(len(backend.key_group_range))
        self._maps: list[dict[tuple[Any, Any], Any]] = self._cow.maps  # read directly; write through _cow
        inner = value_serializer_of(descriptor)
        self._ser: Serializer = TtlSerializer(inner) if descriptor.ttl else inner
        self._uks = user_key_serializer_of(descriptor)
        self._is_map = descriptor.kind is StateKind.MAP
        self._is_list = descriptor.kind is StateKind.LIST
        self._ttl_ms = descriptor.ttl.ttl_ms if descriptor.ttl else None
        self._last_namespace: Any = None
        self._tagged = isinstance(inner, TaggedSerializer)
        self._uks_tagged = isinstance(self._uks, TaggedSerializer)

    # --------------------------------------------------------------- StateTable port

    def namespace_token(self, namespace: Any) -> Any:
        if namespace is not self._last_namespace:  # the same object again (a window's records): checked
            hash(namespace)
            encode_namespace(namespace)  # refuse namespaces the snapshot could not encode
            self._last_namespace = namespace
        return namespace

    def get(self, ns: Any) -> Any:
        b = self._b
        stored = self._maps[b._kgi].get((b._key, ns), MISSING)
        if self._cow.pending and stored is not MISSING and (self._is_list or self._is_map or may_change(stored)):
            slot = (b._key, ns)
            stored = self._cow.owned(b._kgi, slot, self._copy)[slot]
        return stored

    def put(self, ns: Any, value: Any) -> None:
        b = self._b
        if self._is_list:
            value = list(value)
        if b._listeners:  # encoded first: a value it refuses is not stored
            data = self._encode_list(value) if self._is_list else self._ser.serialize(value)
        elif self._is_list:
            for element in value:
                self._encodable(element)
        else:
            self._encodable(value)
        slot = (b._key, ns)
        self._replacing(b._kgi, slot)[slot] = value
        if b._listeners:
            self._emit(PUT, ns, None, data)

    def delete(self, ns: Any) -> None:
        b = self._b
        slot = (b._key, ns)
        self._replacing(b._kgi, slot).pop(slot, None)
        if b._listeners:
            self._emit(CLEAR if self._is_map else DELETE, ns, None, None)

    def append(self, ns: Any, elements: list[Any]) -> None:
        b = self._b
        encoded = [self._ser.serialize(element) for element in elements] if b._listeners else None
        if encoded is None:
            for element in elements:
                self._encodable(element)
        slot = (b._key, ns)
        current = self._live(b._kgi, slot).setdefault(slot, [])
        current.extend(elements)
        if encoded is not None:
            for data in encoded:
                self._emit(ADD, ns, None, data)

    def get_entry(self, ns: Any, user_key: Any) -> Any:
        b = self._b
        slot = (b._key, ns)
        entries = self._maps[b._kgi].get(slot)
        if entries is not None and self._cow.pending:
            entries = self._cow.owned(b._kgi, slot, self._copy)[slot]
        return MISSING if entries is None else entries.get(user_key, MISSING)

    def put_entry(self, ns: Any, user_key: Any, value: Any) -> None:
        b = self._b
        if b._listeners:
            key_data, data = self._uks.serialize(user_key), self._ser.serialize(value)
        else:
            if not (self._uks_tagged and type(user_key) in _ALWAYS_ENCODED):
                self._uks.serialize(user_key)
            self._encodable(value)
        slot = (b._key, ns)
        self._live(b._kgi, slot).setdefault(slot, {})[user_key] = value
        if b._listeners:
            self._emit(PUT, ns, key_data, data)

    def delete_entry(self, ns: Any, user_key: Any) -> None:
        b = self._b
        slot = (b._key, ns)
        m = self._live(b._kgi, slot)
        entries = m.get(slot)
        if entries is not None:
            entries.pop(user_key, None)
            if not entries:
                del m[slot]
        if b._listeners:
            self._emit(DELETE, ns, self._uks.serialize(user_key), None)

    def entries(self, ns: Any) -> Iterator[tuple[Any, Any]]:
        b = self._b
        slot = (b._key, ns)
        entries = self._maps[b._kgi].get(slot)
        if entries is not None and self._cow.pending:
            entries = self._cow.owned(b._kgi, slot, self._copy)[slot]
        return iter(()) if entries is None else iter(list(entries.items()))

    def _encodable(self, stored: Any) -> None:
        """Raise the serializer's error now for a value a snapshot could not encode (see the class)."""
        if self._tagged and type(stored[0] if self._ttl_ms is not None else stored) in _ALWAYS_ENCODED:
            return
        self._ser.serialize(stored)

    # --------------------------------------------------------------- copy-on-write

    def capture(self) -> list[dict[tuple[Any, Any], Any]]:
        """The key groups' maps as they are now, unchanged until :meth:`release` (a snapshot's
        synchronous part: no copy)."""
        return self._cow.capture()

    def release(self) -> None:
        self._cow.release()

    def _live(self, index: int, slot: tuple[Any, Any]) -> dict[tuple[Any, Any], Any]:
        """The live map of key-group index ``index`` where the object at ``slot`` may be changed in place."""
        return self._cow.owned(index, slot, self._copy) if self._cow.pending else self._maps[index]

    def _replacing(self, index: int, slot: tuple[Any, Any]) -> dict[tuple[Any, Any], Any]:
        """The live map of key-group index ``index`` for a write that replaces or removes the object at ``slot``."""
        return self._cow.replaced(index, slot) if self._cow.pending else self._maps[index]

    def _copy(self, stored: Any) -> Any:
        """A copy of a stored object no capture shares: containers copied, mutable values
        through the serializer (as Flink's heap backend copies with ``TypeSerializer.copy``)."""
        if self._is_map:
            return {user_key: self._copy_value(value) for user_key, value in stored.items()}
        if self._is_list:
            return [self._copy_value(element) for element in stored]
        return self._copy_value(stored)

    def _copy_value(self, value: Any) -> Any:
        return self._ser.deserialize(self._ser.serialize(value)) if may_change(value) else value

    # --------------------------------------------------------------- bytes in and out

    def stored_keys(self) -> Iterator[Any]:
        for m in self._maps:
            seen: set[Any] = set()
            for key, _ in list(m):
                if key not in seen:
                    seen.add(key)
                    yield key

    def _emit(self, op: StateChangeOp, ns: Any, user_key: bytes | None, value: bytes | None) -> None:
        b = self._b
        change = KeyedStateChange(
            self.name, b._key_group, b._stored_key, encode_namespace(ns), op, user_key, value
        )
        for listener in b._listeners:
            listener(change)

    def _encode_list(self, elements: list[Any]) -> bytes:
        return frame_elements([self._ser.serialize(e) for e in elements])

    def apply(self, change: KeyedStateChange) -> None:
        """Apply a byte-level change (recovery, restore) to the live objects."""
        slot = (decode_key(change.key), decode_namespace(change.namespace))
        m = self._live(change.key_group - self._b.key_group_range.start, slot)
        op, ser = change.op, self._ser
        if op is PUT and self._is_map:
            m.setdefault(slot, {})[self._uks.deserialize(change.user_key)] = ser.deserialize(change.value)
        elif op is PUT and self._is_list:
            m[slot] = [ser.deserialize(e) for e in unframe_elements(change.value)]
        elif op is PUT:
            m[slot] = ser.deserialize(change.value)
        elif op is ADD:
            m.setdefault(slot, []).append(ser.deserialize(change.value))
        elif change.user_key is not None:
            entries = m.get(slot)
            if entries is not None:
                entries.pop(self._uks.deserialize(change.user_key), None)
                if not entries:
                    del m[slot]
        else:
            m.pop(slot, None)

    def cleanup_expired(self, now_ms: int) -> int:
        """Drop every expired value, element or entry; returns how many slots changed."""
        return sum(self.cleanup_slot(index, slot, now_ms) for index, slot in self.expirable_slots())

    def expirable_slots(self) -> Iterator[tuple[int, tuple[Any, Any]]]:
        """(key-group index, slot) of every stored value, as they are when each key group is
        reached (none without TTL): what an incremental cleanup walks."""
        if self._ttl_ms is None:
            return
        for index in range(len(self._maps)):
            for slot in list(self._maps[index]):
                yield index, slot

    def cleanup_slot(self, index: int, slot: tuple[Any, Any], now_ms: int) -> int:
        """Drop the expired value, elements or entries of one slot; 1 when it changed (a slot
        already gone counts 0). The listeners (a changelog) get the change: a DELETE of each
        expired map entry or of the value, the list's live elements PUT again."""
        ttl, stored = self._ttl_ms, self._maps[index].get(slot)
        if ttl is None or stored is None:
            return 0
        if self._is_map:
            live: Any = {k: v for k, v in stored.items() if not is_expired(v[1], ttl, now_ms)}
        elif self._is_list:
            live = [e for e in stored if not is_expired(e[1], ttl, now_ms)]
        else:
            live = None if is_expired(stored[1], ttl, now_ms) else stored
        if live is stored or (live is not None and len(live) == len(stored)):
            return 0
        m = self._replacing(index, slot)
        if live:
            m[slot] = live
        else:
            del m[slot]
        if self._b._listeners:
            self._emit_cleanup(self._b.key_group_range.start + index, slot, stored, live)
        return 1

    def _emit_cleanup(self, key_group: int, slot: tuple[Any, Any], stored: Any, live: Any) -> None:
        key, ns = encode_key(slot[0]), encode_namespace(slot[1])
        if self._is_map:
            changes = [KeyedStateChange(self.name, key_group, key, ns, DELETE, self._uks.serialize(user_key), None)
                       for user_key in stored if not live or user_key not in live]
        elif self._is_list and live:
            changes = [KeyedStateChange(self.name, key_group, key, ns, PUT, None, self._encode_list(live))]
        else:
            changes = [KeyedStateChange(self.name, key_group, key, ns, DELETE, None, None)]
        for change in changes:
            for listener in self._b._listeners:
                listener(change)

    def size(self, sample: int = SIZE_SAMPLE) -> StateSize:
        """The entries, counted; the bytes, estimated from the serialized size of the first
        ``sample`` keys' entries (what a snapshot would write of them, expired ones included)."""
        if self._is_map:
            entries = sum(len(stored) for m in self._maps for stored in m.values())
        else:
            entries = sum(len(m) for m in self._maps)
        start = self._b.key_group_range.start
        stored_entries = (entry for index, m in enumerate(self._maps) for (key, ns), stored in m.items()
                          for entry in self._entries_of((self.name, start + index, encode_key(key),
                                                         encode_namespace(ns)), stored, self._ser, None, 0))
        sizes = [entry_bytes(entry) for entry in itertools.islice(stored_entries, sample)]
        sampled, sampled_bytes = len(sizes), sum(sizes)
        return StateSize(entries, round(entries * sampled_bytes / sampled) if sampled else 0)

    def snapshot_entries(self, maps: list[dict[tuple[Any, Any], Any]], now_ms: int) -> Iterator[Entry]:
        """Canonical entries of a :meth:`capture` in key-group order; expired TTL values are left out."""
        start, name, ser, ttl = self._b.key_group_range.start, self.name, self._ser, self._ttl_ms
        for index, m in enumerate(maps):
            for (key, ns), stored in m.items():
                prefix = (name, start + index, encode_key(key), encode_namespace(ns))
                yield from self._entries_of(prefix, stored, ser, ttl, now_ms)

    def _entries_of(
        self, prefix: tuple[Any, ...], stored: Any, ser: Serializer, ttl: int | None, now: int
    ) -> Iterator[Entry]:
        if self._is_map:
            for user_key, value in stored.items():
                if ttl is None or not is_expired(value[1], ttl, now):
                    yield Entry(*prefix, self._uks.serialize(user_key), ser.serialize(value))
        elif self._is_list:
            data = [ser.serialize(e) for e in stored]
            if ttl is not None:
                data = [d for d in data if not is_expired(timestamp_of(d), ttl, now)]
            if data:
                yield Entry(*prefix, None, b"".join(frame_element(d) for d in data))
        elif ttl is None or not is_expired(stored[1], ttl, now):
            yield Entry(*prefix, None, ser.serialize(stored))


_Slot = tuple[int, bytes, bytes]  # key group, stored key, namespace


class RawStateStore:
    """Byte-level state of one not-yet-registered state: slot -> user key (or None) -> bytes."""

    def __init__(self) -> None:
        self.slots: dict[_Slot, dict[bytes | None, bytes]] = {}

    def apply(self, change: KeyedStateChange) -> None:
        slot = (change.key_group, change.key, change.namespace)
        op = change.op
        if op is PUT:
            self.slots.setdefault(slot, {})[change.user_key] = change.value or b""
        elif op is ADD:
            values = self.slots.setdefault(slot, {})
            values[None] = values.get(None, b"") + frame_element(change.value or b"")
        elif op is CLEAR or change.user_key is None:
            self.slots.pop(slot, None)
        else:
            values = self.slots.get(slot, {})
            values.pop(change.user_key, None)
            if not values:
                self.slots.pop(slot, None)

    def copy(self) -> RawStateStore:
        """A copy no later change reaches (a snapshot's capture)."""
        copied = RawStateStore()
        copied.slots = {slot: dict(values) for slot, values in self.slots.items()}
        return copied

    def changes(self, name: str) -> Iterator[KeyedStateChange]:
        for (key_group, key, ns), values in self.slots.items():
            for user_key, value in values.items():
                yield KeyedStateChange(name, key_group, key, ns, PUT, user_key, value)
