"""The canonical keyed-state snapshot format, readable by every backend.

One file holds the state of one key-group range. Layout (integers big-endian)::

    magic      8 bytes  b"TMKSNAP1"
    header     u32 length + UTF-8 JSON: {"format": 1, "max_parallelism", "key_group_start",
               "key_group_end", "checkpoint_id", "states": [StateMeta...]}
    entries    repeated: u8 1, u16 state index, u16 key group,
               u32 len + stored key, u32 len + namespace,
               i32 len + user key (-1: none), u32 len + value
    end        u8 0, u64 entry count
    trailer    32 bytes: SHA-256 of every preceding byte

Values are the serialized stored form (TTL values carry their 8-byte timestamp first; a list
value is the framed list of serialized elements), so both backends write identical entries.
A ``StateMeta`` is ``{"name", "kind", "value_serializer", "user_key_serializer", "ttl_ms"}``.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from tidemark.state.descriptors import (
    StateDescriptor,
    user_key_serializer_of,
    value_serializer_of,
)
from tidemark.keygroups import KeyGroupRange
from tidemark.state.serializers import describe

MAGIC = b"TMKSNAP1"
_ENTRY = struct.Struct(">BHHI")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_END = struct.Struct(">BQ")


class SnapshotFormatError(ValueError):
    """A snapshot file is not in the canonical format or fails its own checksum."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored item: a value, a whole list, or one map entry (``user_key`` set)."""

    state_name: str
    key_group: int
    key: bytes
    namespace: bytes
    user_key: bytes | None
    value: bytes


@dataclass(frozen=True)
class RestoredPart:
    """The states described by one state handle and its entries inside the wanted key groups."""

    source: str
    states: list[dict[str, Any]]
    entries: Iterator[Entry]


def state_meta(descriptor: StateDescriptor) -> dict[str, Any]:
    """What snapshots record about a registered state."""
    return {
        "name": descriptor.name,
        "kind": descriptor.kind.value,
        "value_serializer": describe(value_serializer_of(descriptor)),
        "user_key_serializer": describe(user_key_serializer_of(descriptor)),
        "ttl_ms": descriptor.ttl.ttl_ms if descriptor.ttl else None,
    }


def write_snapshot(
    header: dict[str, Any], states: list[dict[str, Any]], entries: Iterable[Entry]
) -> bytes:
    """Encode a snapshot; ``entries`` may come in any order, for states listed in ``states``."""
    index = {meta["name"]: i for i, meta in enumerate(states)}
    out = io.BytesIO()
    head = json.dumps({**header, "format": 1, "states": states}, sort_keys=True).encode()
    out.write(MAGIC + _U32.pack(len(head)) + head)
    write, pack_entry, pack_u32 = out.write, _ENTRY.pack, _U32.pack
    count = 0
    for e in entries:
        user_key = e.user_key
        write(pack_entry(1, index[e.state_name], e.key_group, len(e.key)))
        write(e.key)
        write(pack_u32(len(e.namespace)) + e.namespace)
        if user_key is None:
            write(b"\xff\xff\xff\xff")
        else:
            write(pack_u32(len(user_key)) + user_key)
        write(pack_u32(len(e.value)) + e.value)
        count += 1
    write(_END.pack(0, count))
    body = out.getvalue()
    return body + hashlib.sha256(body).digest()


@dataclass(frozen=True)
class SnapshotReader:
    """A parsed canonical snapshot; ``entries(range)`` yields only that range's key groups."""

    header: dict[str, Any]
    data: bytes
    body_offset: int
    name: str

    @classmethod
    def parse(cls, data: bytes, name: str) -> SnapshotReader:
        if len(data) < len(MAGIC) + 4 + 32 or not data.startswith(MAGIC):
            raise SnapshotFormatError(f"{name}: not a canonical keyed-state snapshot")
        if hashlib.sha256(data[:-32]).digest() != data[-32:]:
            raise SnapshotFormatError(f"{name}: snapshot checksum mismatch (corrupted file)")
        (size,) = _U32.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + 4
        try:
            header = json.loads(data[start : start + size])
        except ValueError as exc:
            raise SnapshotFormatError(f"{name}: unreadable snapshot header: {exc}") from None
        if header.get("format") != 1:
            raise SnapshotFormatError(f"{name}: unsupported snapshot format {header.get('format')}")
        return cls(header, data, start + size, name)

    @property
    def states(self) -> list[dict[str, Any]]:
        return list(self.header["states"])

    @property
    def key_group_range(self) -> KeyGroupRange:
        return KeyGroupRange(self.header["key_group_start"], self.header["key_group_end"])

    def entries(self, key_groups: KeyGroupRange | None = None) -> Iterator[Entry]:
        try:
            yield from self._entries(key_groups)
        except (struct.error, IndexError) as exc:
            raise SnapshotFormatError(f"{self.name}: truncated snapshot entry: {exc}") from None

    def _entries(self, key_groups: KeyGroupRange | None) -> Iterator[Entry]:
        data, pos = self.data, self.body_offset
        names = [meta["name"] for meta in self.header["states"]]
        lo, hi = (key_groups.start, key_groups.end) if key_groups else (0, 1 << 16)
        unpack_entry, unpack_u32, unpack_i32 = _ENTRY.unpack_from, _U32.unpack_from, _I32.unpack_from
        while data[pos] == 1:
            _, state, key_group, key_len = unpack_entry(data, pos)
            pos += _ENTRY.size
            key = data[pos : pos + key_len]
            pos += key_len
            (ns_len,) = unpack_u32(data, pos)
            namespace = data[pos + 4 : pos + 4 + ns_len]
            pos += 4 + ns_len
            (uk_len,) = unpack_i32(data, pos)
            pos += 4
            user_key = None
            if uk_len >= 0:
                user_key = data[pos : pos + uk_len]
                pos += uk_len
            (value_len,) = unpack_u32(data, pos)
            value = data[pos + 4 : pos + 4 + value_len]
            pos += 4 + value_len
            if lo <= key_group <= hi:
                yield Entry(names[state], key_group, key, namespace, user_key, value)
        if data[pos] != 0:
            raise SnapshotFormatError(f"{self.name}: bad entry marker at offset {pos}")
