"""What a state handle's files record about the state they hold, read without their entries:
the backend that wrote them and each state's definition (name, kind, serializers, TTL).

A canonical snapshot (``KEYED_FULL``, ``MATERIALIZED``) records both in its header
(:mod:`tidemark.state.snapshot`), an incremental RocksDB set in its ``INCREMENTAL.json``
(:mod:`tidemark.state.rocksdb.snapshot`), an operator-state file in its header
(:mod:`tidemark.state.operator`). Files are read verified: a corrupted one raises
``CorruptStateFile`` (or ``SnapshotFormatError``) naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.state.operator import snapshot_header
from tidemark.state.rocksdb.snapshot import read_metadata as read_incremental_metadata
from tidemark.state.snapshot import HeaderSink
from tidemark.storage.base import CheckpointStorage

HEAP, ROCKSDB = "heap", "rocksdb"


@dataclass(frozen=True)
class HandleHeader:
    """The writer (``heap``, ``rocksdb``; ``None`` for operator state) and the state definitions
    of one handle: keyed states as ``state_meta`` records them, operator states with their mode."""

    backend: str | None
    states: tuple[dict[str, Any], ...]


def read_handle_header(handle: StateHandle, storage: CheckpointStorage) -> HandleHeader:
    """The header of ``handle`` (the first file's, for a canonical handle of several files)."""
    if handle.kind is StateHandleKind.KEYED_INCREMENTAL:
        metadata = read_incremental_metadata(handle, storage)
        return HandleHeader(metadata.get("backend", ROCKSDB), tuple(metadata["states"]))
    if not handle.files:
        return HandleHeader(None, ())
    ref = handle.files[0]
    if handle.kind is StateHandleKind.OPERATOR:
        return HandleHeader(None, tuple(snapshot_header(storage.read_verified(ref), ref.path)["states"]))
    sink = HeaderSink()  # the file streamed through and verified, only its header kept
    storage.read_verified_into(ref, sink)  # type: ignore[arg-type]
    header = sink.header(ref.path)
    return HandleHeader(header.get("backend", HEAP), tuple(header["states"]))


def writer_backend(handles: tuple[StateHandle, ...], storage: CheckpointStorage) -> str:
    """The backend that wrote a task's keyed handles: RocksDB for an incremental set, else what
    the first canonical file's header names (heap when none)."""
    keyed = [h for h in handles if h.kind is not StateHandleKind.OPERATOR]
    if any(h.kind is StateHandleKind.KEYED_INCREMENTAL for h in keyed):
        return ROCKSDB
    if not keyed:
        return HEAP
    return read_handle_header(keyed[0], storage).backend or HEAP
