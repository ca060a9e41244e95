"""Reading keyed state handles of any kind as canonical entries, filtered by key group.

The canonical format's kinds (``KEYED_FULL``, ``MATERIALIZED``) are read here; a backend with a
native format registers the reader of its kind (RocksDB: ``KEYED_INCREMENTAL``) in
:mod:`tidemark.state.backend_registry`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterator, Sequence

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.state.backend_registry import handle_reader, register_handle_reader
from tidemark.state.snapshot import RestoredPart, SnapshotReader
from tidemark.storage.base import CheckpointStorage

KEYED_KINDS = (StateHandleKind.KEYED_FULL, StateHandleKind.KEYED_INCREMENTAL,
               StateHandleKind.MATERIALIZED)


def handle_key_groups(handle: StateHandle) -> KeyGroupRange:
    """The key groups a keyed handle holds."""
    return KeyGroupRange(handle.key_group_start, handle.key_group_end)


def overlapping(handles: Sequence[StateHandle], key_groups: KeyGroupRange) -> list[StateHandle]:
    """Keyed handles whose key-group range intersects ``key_groups``."""
    result = []
    for handle in handles:
        if handle.kind not in KEYED_KINDS:
            raise ValueError(f"not a keyed state handle: {handle.kind.value}")
        if len(handle_key_groups(handle).intersection(key_groups)):
            result.append(handle)
    return result


def read_handle(
    handle: StateHandle, storage: CheckpointStorage, key_groups: KeyGroupRange
) -> Iterator[RestoredPart]:
    """Every part of ``handle`` as canonical entries inside ``key_groups``, by the reader
    registered for its kind.

    Files are read verified (``read_verified``, ``read_verified_into``): a corrupted file raises
    ``CorruptStateFile`` naming it.
    """
    yield from handle_reader(handle.kind)(handle, storage, key_groups)


def read_canonical(
    handle: StateHandle, storage: CheckpointStorage, key_groups: KeyGroupRange
) -> Iterator[RestoredPart]:
    """The parts of a handle whose files are canonical snapshots (one part per file). Each file
    is streamed, verified, into a local temporary file and its entries read from there a chunk at
    a time (:meth:`SnapshotReader.open`), so a restore never holds a whole file in memory: take
    each part's entries before the next part (its temporary file is then deleted)."""
    for ref in handle.files:
        with tempfile.NamedTemporaryFile(prefix="tidemark-restore-", suffix=".tmks") as local:
            storage.read_verified_into(ref, local)  # type: ignore[arg-type]
            local.flush()
            reader = SnapshotReader.open(Path(local.name), ref.path)
            yield RestoredPart(ref.path, reader.states, reader.entries(key_groups))


register_handle_reader(StateHandleKind.KEYED_FULL, read_canonical)
register_handle_reader(StateHandleKind.MATERIALIZED, read_canonical)
