"""RocksDB state tables: one column family per state, every key prefixed by its key group.

Key layout (big-endian)::

    u16 key group | u32 len + stored key | u32 len + namespace | [user key bytes: map state]

so one key group, one key, or one (key, namespace) is a contiguous key range, and a key-group
range can be cut with ``delete_range``. Values are the canonical stored bytes (see
``state/snapshot.py``): serialized value (TTL: 8-byte timestamp first) or a framed list.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Iterator, Protocol

from tidemark.keygroups import decode_key
from tidemark.protocol.messages import StateChangeOp
from tidemark.state.descriptors import StateDescriptor, user_key_serializer_of, value_serializer_of
from tidemark.state.serializers import (Serializer, TaggedSerializer, frame_element, frame_elements,
                                        unframe_elements)
from tidemark.state.table import MISSING, ChangeListener, KeyedStateChange, encode_namespace
from tidemark.state.ttl import TtlSerializer

if TYPE_CHECKING:
    import rocksdict


PUT, ADD, DELETE, CLEAR = StateChangeOp.PUT, StateChangeOp.ADD, StateChangeOp.DELETE, StateChangeOp.CLEAR
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
WRITE_BUFFER_ENTRIES = 20_000  # keys a value table's write buffer holds before it writes them (a few MB)
_UNCHANGING = frozenset((type(None), bool, int, float, str, bytes))


def kept_as_written(value: Any) -> bool:
    """True for a value that cannot change in place and that the default codec gives back as it
    was written (type and value): a write buffer may hold it as is."""
    kind = type(value)
    return kind in _UNCHANGING or (kind is tuple and all(type(item) in _UNCHANGING for item in value))


class CurrentKeySlot(Protocol):
    """What a table reads from its backend (``RocksDBStateBackend``) on every access: the current
    key's key group, stored key and key prefix, and the listeners to tell about changes."""

    _key_group: int
    _stored_key: bytes
    _prefix: bytes
    _listeners: list[ChangeListener]


def key_group_bytes(key_group: int) -> bytes:
    return _U16.pack(key_group)


def key_prefix(key_group: int, stored_key: bytes) -> bytes:
    return _U16.pack(key_group) + _U32.pack(len(stored_key)) + stored_key


def namespace_part(namespace: bytes) -> bytes:
    return _U32.pack(len(namespace)) + namespace


def split_db_key(db_key: bytes) -> tuple[int, bytes, bytes, bytes]:
    """``(key group, stored key, namespace, rest)``; ``rest`` is the user key of map entries."""
    (key_group,) = _U16.unpack_from(db_key)
    (key_len,) = _U32.unpack_from(db_key, 2)
    key = db_key[6 : 6 + key_len]
    pos = 6 + key_len
    (ns_len,) = _U32.unpack_from(db_key, pos)
    namespace = db_key[pos + 4 : pos + 4 + ns_len]
    return key_group, key, namespace, db_key[pos + 4 + ns_len :]


def successor(prefix: bytes) -> bytes:
    """The smallest byte string greater than every string starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff" * (len(prefix) + 1)
    return stripped[:-1] + bytes([stripped[-1] + 1])


class RocksStateTable:
    """Shared plumbing; subclasses implement the StateTable port for each state kind."""

    __slots__ = ("_b", "name", "_cf", "_ser", "_uks", "_last_namespace", "_last_token")

    def __init__(
        self, backend: CurrentKeySlot, descriptor: StateDescriptor, cf: rocksdict.Rdict
    ) -> None:
        self._b = backend
        self.name = descriptor.name
        self._cf = cf
        inner = value_serializer_of(descriptor)
        self._ser: Serializer = TtlSerializer(inner) if descriptor.ttl else inner
        self._uks = user_key_serializer_of(descriptor)
        self._last_namespace: Any = None
        self._last_token = namespace_part(b"")

    def namespace_token(self, namespace: Any) -> bytes:
        if namespace is self._last_namespace:  # the same (immutable) object: a window's records in a row
            return self._last_token
        token = namespace_part(encode_namespace(namespace))
        self._last_namespace, self._last_token = namespace, token
        return token

    def _emit(self, op: StateChangeOp, ns: bytes, user_key: bytes | None, value: bytes | None) -> None:
        b = self._b
        change = KeyedStateChange(self.name, b._key_group, b._stored_key, ns[4:], op, user_key, value)
        for listener in b._listeners:
            listener(change)

    def delete(self, ns: bytes) -> None:
        self._cf.delete(self._b._prefix + ns)
        if self._b._listeners:
            self._emit(DELETE, ns, None, None)

    def write_pending(self) -> None:
        """Write what waits in a write buffer (only value tables have one)."""

    def stored_keys(self) -> Iterator[Any]:
        """The column family's keys are sorted, so a key's entries (all its namespaces and user
        keys) are adjacent within its key group."""
        self.write_pending()
        last: tuple[int, bytes] | None = None
        for db_key in self._cf.keys():
            key_group, stored, _, _ = split_db_key(db_key)
            if (key_group, stored) != last:
                last = (key_group, stored)
                yield decode_key(stored)

    def _unsupported(self, *args: Any) -> Any:
        raise TypeError(f"operation not supported by state {self.name!r}")

    append = get_entry = put_entry = delete_entry = entries = _unsupported


class RocksValueTable(RocksStateTable):
    """Value, reducing and aggregating state: one RocksDB value per (key, namespace).

    A write buffer in front of the column family (Kafka Streams' record cache, Quix Streams'
    transaction cache): a value of the default codec that cannot change in place (``None``, a
    bool, number, string, bytes, or a tuple of those: :func:`kept_as_written`) is serialized when
    it is put, so a value the codec refuses fails the record that put it, and waits with its
    bytes in :attr:`_pending` until :meth:`write_pending`; reads see it first. A key written many
    times between two writes costs one RocksDB write, and its reads no RocksDB read and no
    decoding. The backend writes the buffers before anything reads the column family another
    way and before each snapshot (``RocksDBStateBackend._write_pending``); a buffer of
    ``WRITE_BUFFER_ENTRIES`` keys writes itself. Other values (mutable ones, which RocksDB gives
    back as copies; those of another codec, which may give back another type) and every write
    while the backend has change listeners (the changelog) go to RocksDB at once."""

    __slots__ = ("_pending", "_buffers")

    def __init__(self, backend: CurrentKeySlot, descriptor: StateDescriptor, cf: rocksdict.Rdict) -> None:
        super().__init__(backend, descriptor, cf)
        self._pending: dict[bytes, tuple[Any, bytes]] = {}
        inner = self._ser.inner if isinstance(self._ser, TtlSerializer) else self._ser
        self._buffers = type(inner) is TaggedSerializer

    def get(self, ns: bytes) -> Any:
        key = self._b._prefix + ns
        held = self._pending.get(key)
        if held is not None:
            return held[0]
        data = self._cf.get(key)
        return MISSING if data is None else self._ser.deserialize(data)

    def put(self, ns: bytes, value: Any) -> None:
        b = self._b
        key = b._prefix + ns
        data = self._ser.serialize(value)
        pending = self._pending
        listened = bool(b._listeners)
        if self._buffers and not listened and kept_as_written(value):
            pending[key] = (value, data)
            if len(pending) >= WRITE_BUFFER_ENTRIES:
                self.write_pending()
            return
        if pending:
            pending.pop(key, None)
        self._cf.put(key, data)
        if listened:
            self._emit(PUT, ns, None, data)

    def delete(self, ns: bytes) -> None:
        if self._pending:
            self._pending.pop(self._b._prefix + ns, None)
        super().delete(ns)

    def write_pending(self) -> None:
        """Write the buffered values into the column family (through its current write methods,
        so an open snapshot capture keeps what they replace)."""
        pending = self._pending
        if pending:
            put = self._cf.put
            for key, (_, data) in pending.items():
                put(key, data)
            pending.clear()


class RocksListTable(RocksStateTable):
    """List state: the framed list of serialized elements under (key, namespace)."""

    __slots__ = ()

    def get(self, ns: bytes) -> Any:
        data = self._cf.get(self._b._prefix + ns)
        if data is None:
            return MISSING
        deserialize = self._ser.deserialize
        return [deserialize(e) for e in unframe_elements(data)]

    def put(self, ns: bytes, elements: list[Any]) -> None:
        data = frame_elements([self._ser.serialize(e) for e in elements])
        self._cf.put(self._b._prefix + ns, data)
        if self._b._listeners:
            self._emit(PUT, ns, None, data)

    def append(self, ns: bytes, elements: list[Any]) -> None:
        key = self._b._prefix + ns
        encoded = [self._ser.serialize(e) for e in elements]
        current = self._cf.get(key) or b""
        self._cf.put(key, current + b"".join(frame_element(e) for e in encoded))
        if self._b._listeners:
            for element in encoded:
                self._emit(ADD, ns, None, element)


class RocksMapTable(RocksStateTable):
    """Map state: one RocksDB entry per user key, after the (key, namespace) prefix."""

    __slots__ = ()

    def get(self, ns: bytes) -> Any:
        return MISSING if next(self.entries(ns), None) is None else True

    def put(self, ns: bytes, value: Any) -> None:
        self._unsupported()

    def delete(self, ns: bytes) -> None:
        start = self._b._prefix + ns
        self._cf.delete_range(start, successor(start))
        if self._b._listeners:
            self._emit(CLEAR, ns, None, None)

    def get_entry(self, ns: bytes, user_key: Any) -> Any:
        data = self._cf.get(self._b._prefix + ns + self._uks.serialize(user_key))
        return MISSING if data is None else self._ser.deserialize(data)

    def put_entry(self, ns: bytes, user_key: Any, value: Any) -> None:
        user_bytes = self._uks.serialize(user_key)
        data = self._ser.serialize(value)
        self._cf.put(self._b._prefix + ns + user_bytes, data)
        if self._b._listeners:
            self._emit(PUT, ns, user_bytes, data)

    def delete_entry(self, ns: bytes, user_key: Any) -> None:
        user_bytes = self._uks.serialize(user_key)
        self._cf.delete(self._b._prefix + ns + user_bytes)
        if self._b._listeners:
            self._emit(DELETE, ns, user_bytes, None)

    def entries(self, ns: bytes) -> Iterator[tuple[Any, Any]]:
        start = self._b._prefix + ns
        cut = len(start)
        uks, ser = self._uks.deserialize, self._ser.deserialize
        found = []
        for db_key, data in self._cf.items(from_key=start):
            if not db_key.startswith(start):
                break
            found.append((uks(db_key[cut:]), ser(data)))
        return iter(found)
