"""Values of state encoded into canonical snapshot entries: the inverse of :mod:`.rows`.

An :class:`EntryEncoder` is built from the definition a snapshot records for one state
(``state_meta``, as :class:`~.rows.EntryDecoder` is) and turns a key's value, in the form the
reader reads it, into the stored entries a backend restores: a value state's value, a list
state's list, a map state's dict (one entry per map key), a reducing state's reduced value, an
aggregating state's accumulator. Values of a state with TTL are written with the given time as
their TTL timestamp. A key is ``str``, ``int`` or ``bytes`` (the key-bytes rule); the key group
follows from it and the max parallelism. :meth:`EntryEncoder.remap` re-encodes one stored entry's
value with a function of the decoded one (a transform's map; a value with TTL then takes the
given time as its timestamp).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from tidemark.keygroups import assign_key_bytes_to_key_group, encode_key
from tidemark.state.descriptors import StateKind
from tidemark.state.serializers import Serializer, frame_elements, serializer_from_config
from tidemark.state.snapshot import Entry
from tidemark.state.table import encode_namespace
from tidemark.state.ttl import TtlSerializer
from tidemark.state_processor.rows import EntryDecoder

ValueFunction = Callable[[Any, Any], Any]
"""``function(key, value) -> new value`` (``None``: the key's value is removed)."""


def key_group_of(stored_key: bytes, max_parallelism: int) -> int:
    """The key group of a stored key (``keygroups.encode_key``: a type tag, then the key bytes)."""
    return assign_key_bytes_to_key_group(stored_key[1:], max_parallelism)


def _serializer(described: dict[str, Any]) -> Serializer:
    return serializer_from_config(described["id"], described.get("config") or {})


class EntryEncoder:
    """Encodes the values of one state, given the definition its snapshot records."""

    def __init__(self, meta: dict[str, Any], written_at_ms: int, *, values: Serializer | None = None,
                 user_keys: Serializer | None = None) -> None:
        """``values`` and ``user_keys``: the state's own serializers (a descriptor's), when known;
        else those the definition records (a dataclass's value is then given as a dict of its
        fields, the Avro datum)."""
        self.name = meta["name"]
        self.kind = StateKind(meta["kind"])
        inner = values or _serializer(meta["value_serializer"])
        self._ttl = meta.get("ttl_ms") is not None
        self._values: Serializer = TtlSerializer(inner) if self._ttl else inner
        self._user_keys = user_keys or _serializer(meta["user_key_serializer"])
        self._written_at = written_at_ms
        self._decoder = EntryDecoder(meta)

    def _value(self, value: Any) -> bytes:
        return self._values.serialize((value, self._written_at) if self._ttl else value)

    def value_bytes(self, value: Any) -> bytes:
        """The stored form of one value (a list state's: the framed list of its elements)."""
        if self.kind is StateKind.LIST:
            if not isinstance(value, (list, tuple)):
                raise TypeError(f"a value of list state {self.name!r} is a list, not {type(value).__name__}")
            return frame_elements([self._value(element) for element in value])
        return self._value(value)

    def entries(self, key: Any, value: Any, max_parallelism: int, namespace: Any = None) -> Iterator[Entry]:
        """The entries of ``key``'s ``value`` (none for ``None``, an empty list or map)."""
        stored_key = encode_key(key)
        group = key_group_of(stored_key, max_parallelism)
        ns = encode_namespace(namespace)
        if value is None:
            return
        if self.kind is StateKind.MAP:
            if not isinstance(value, dict):
                raise TypeError(f"a value of map state {self.name!r} is a dict, not {type(value).__name__}")
            for user_key, item in value.items():
                if item is not None:
                    yield Entry(self.name, group, stored_key, ns, self._user_keys.serialize(user_key), self._value(item))
            return
        if self.kind is StateKind.LIST and not value:
            return
        yield Entry(self.name, group, stored_key, ns, None, self.value_bytes(value))

    def remap(self, entry: Entry, function: ValueFunction) -> Entry | None:
        """``entry`` with its value replaced by ``function(key, value)`` (decoded as the reader
        decodes it: a map entry's value is that entry's); ``None`` when the function removes it."""
        row = self._decoder.row(entry, "")
        value = function(row.key, row.value)
        if value is None or (self.kind is StateKind.LIST and not value):
            return None
        return replace(entry, value=self._value(value) if self.kind is StateKind.MAP else self.value_bytes(value))
