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
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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


def snapshot_chunks(
    header: dict[str, Any], states: list[dict[str, Any]], entries: Iterable[Entry]
) -> Iterator[bytes]:
    """Encode a snapshot in pieces of about :data:`CHUNK` bytes (more for a larger entry), so that
    neither the snapshot nor a copy of it is ever in memory whole; ``entries`` may come in any
    order, for states listed in ``states``."""
    index = {meta["name"]: i for i, meta in enumerate(states)}
    digest = hashlib.sha256()
    out = bytearray()
    head = json.dumps({**header, "format": 1, "states": states}, sort_keys=True).encode()
    out += MAGIC + _U32.pack(len(head)) + head
    pack_entry, pack_u32 = _ENTRY.pack, _U32.pack
    count = 0
    for e in entries:
        user_key = e.user_key
        out += pack_entry(1, index[e.state_name], e.key_group, len(e.key))
        out += e.key
        out += pack_u32(len(e.namespace))
        out += e.namespace
        if user_key is None:
            out += b"\xff\xff\xff\xff"
        else:
            out += pack_u32(len(user_key))
            out += user_key
        out += pack_u32(len(e.value))
        out += e.value
        count += 1
        if len(out) >= CHUNK:
            piece = bytes(out)
            out.clear()
            digest.update(piece)
            yield piece
    out += _END.pack(0, count)
    digest.update(out)
    yield bytes(out) + digest.digest()


def write_snapshot(header: dict[str, Any], states: list[dict[str, Any]], entries: Iterable[Entry]) -> bytes:
    """:func:`snapshot_chunks` in one piece (small snapshots, tests)."""
    return b"".join(snapshot_chunks(header, states, entries))


class ChunkReader(io.RawIOBase):
    """A readable file over pieces of bytes (:func:`snapshot_chunks`), for ``storage.write_from``."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        super().__init__()
        self._chunks = iter(chunks)
        self._rest = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            piece = next(self._chunks, None)
            if piece is None:
                return 0
            self._rest = memoryview(piece)
        size = min(len(buffer), len(self._rest))
        buffer[:size] = self._rest[:size]
        self._rest = self._rest[size:]
        return size


CHUNK = 1 << 20  # what a snapshot read from a file holds of it at a time (more for a larger entry)


def _parse_header(head: bytes, name: str) -> tuple[dict[str, Any], int]:
    """The header of a snapshot starting with ``head`` (at least up to its entries) and the
    offset where its entries start."""
    if not head.startswith(MAGIC) or len(head) < len(MAGIC) + 4:
        raise SnapshotFormatError(f"{name}: not a canonical keyed-state snapshot")
    (size,) = _U32.unpack_from(head, len(MAGIC))
    start = len(MAGIC) + 4
    if len(head) < start + size:
        raise SnapshotFormatError(f"{name}: truncated snapshot header")
    try:
        header = json.loads(head[start : start + size])
    except ValueError as exc:
        raise SnapshotFormatError(f"{name}: unreadable snapshot header: {exc}") from None
    if header.get("format") != 1:
        raise SnapshotFormatError(f"{name}: unsupported snapshot format {header.get('format')}")
    return header, start + size


class HeaderSink:
    """Where a snapshot's content can be streamed (``write``) to keep only its start: then
    :meth:`header` is its header (the rest is dropped, so memory holds the header only)."""

    def __init__(self) -> None:
        self._head = b""
        self._wanted = len(MAGIC) + 4

    def write(self, chunk: bytes) -> int:
        given = len(chunk)
        while len(self._head) < self._wanted and chunk:
            take = self._wanted - len(self._head)
            self._head += chunk[:take]
            chunk = chunk[take:]
            if len(self._head) == len(MAGIC) + 4 and self._head.startswith(MAGIC):
                self._wanted += _U32.unpack_from(self._head, len(MAGIC))[0]
        return given

    def header(self, name: str) -> dict[str, Any]:
        return _parse_header(self._head, name)[0]


@dataclass(frozen=True)
class SnapshotReader:
    """A canonical snapshot, checked against its checksum; ``entries(range)`` yields only that
    range's key groups. :meth:`parse` reads one held in memory; :meth:`open` one in a local file,
    which it reads a chunk at a time (memory bounded by the largest entry, whatever the file's
    size): a first pass checks the checksum, each ``entries()`` reads the file again."""

    header: dict[str, Any]
    body_offset: int
    name: str
    data: bytes | None = None  # the whole snapshot (parse), else
    path: Path | None = None  # the file it is read from (open)

    @classmethod
    def parse(cls, data: bytes, name: str) -> SnapshotReader:
        if len(data) < len(MAGIC) + 4 + 32 or not data.startswith(MAGIC):
            raise SnapshotFormatError(f"{name}: not a canonical keyed-state snapshot")
        if hashlib.sha256(data[:-32]).digest() != data[-32:]:
            raise SnapshotFormatError(f"{name}: snapshot checksum mismatch (corrupted file)")
        header, body_offset = _parse_header(data, name)
        return cls(header, body_offset, name, data=data)

    @classmethod
    def open(cls, path: Path, name: str) -> SnapshotReader:
        with path.open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(MAGIC) + 4 + 32 or f.read(len(MAGIC)) != MAGIC:
                raise SnapshotFormatError(f"{name}: not a canonical keyed-state snapshot")
            f.seek(0)
            digest, left = hashlib.sha256(), size - 32
            while left:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    raise SnapshotFormatError(f"{name}: truncated snapshot (the file shrank while read)")
                digest.update(chunk)
                left -= len(chunk)
            if digest.digest() != f.read(32):
                raise SnapshotFormatError(f"{name}: snapshot checksum mismatch (corrupted file)")
            f.seek(0)
            head = f.read(len(MAGIC) + 4)
            head += f.read(_U32.unpack_from(head, len(MAGIC))[0])
        header, body_offset = _parse_header(head, name)
        return cls(header, body_offset, name, path=path)

    @property
    def states(self) -> list[dict[str, Any]]:
        return list(self.header["states"])

    @property
    def key_group_range(self) -> KeyGroupRange:
        return KeyGroupRange(self.header["key_group_start"], self.header["key_group_end"])

    def entries(self, key_groups: KeyGroupRange | None = None) -> Iterator[Entry]:
        lo, hi = (key_groups.start, key_groups.end) if key_groups else (0, 1 << 16)
        if self.data is not None:
            yield from self._entries(self.data, self.body_offset, lambda: b"", lo, hi)
            return
        assert self.path is not None
        with self.path.open("rb") as f:
            f.seek(self.body_offset)
            yield from self._entries(b"", 0, lambda: f.read(CHUNK), lo, hi)

    def _entries(self, data: bytes, pos: int, read: Callable[[], bytes], lo: int, hi: int) -> Iterator[Entry]:
        """The entries from ``data[pos:]`` on, ``read()`` giving the bytes that follow ``data``
        (``b""`` at the end): an entry cut by the end of ``data`` is read again once more is added."""
        names = [meta["name"] for meta in self.header["states"]]
        unpack_entry, unpack_u32, unpack_i32 = _ENTRY.unpack_from, _U32.unpack_from, _I32.unpack_from
        while True:
            try:
                if data[pos] != 1:
                    break
                _, state, key_group, key_len = unpack_entry(data, pos)
                end = pos + _ENTRY.size
                key = data[end : end + key_len]
                end += key_len
                (ns_len,) = unpack_u32(data, end)
                namespace = data[end + 4 : end + 4 + ns_len]
                end += 4 + ns_len
                (uk_len,) = unpack_i32(data, end)
                end += 4
                user_key = None
                if uk_len >= 0:
                    user_key = data[end : end + uk_len]
                    end += uk_len
                (value_len,) = unpack_u32(data, end)
                value = data[end + 4 : end + 4 + value_len]
                end += 4 + value_len
                if end > len(data):
                    raise IndexError("entry cut")
            except (struct.error, IndexError) as exc:
                more = read()
                if not more:
                    raise SnapshotFormatError(f"{self.name}: truncated snapshot entry: {exc}") from None
                data, pos = data[pos:] + more, 0
                continue
            pos = end
            if lo <= key_group <= hi:
                yield Entry(names[state], key_group, key, namespace, user_key, value)
        if data[pos] != 0:
            raise SnapshotFormatError(f"{self.name}: bad entry marker at offset {pos}")
