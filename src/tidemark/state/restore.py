"""Reading keyed state handles of any kind as canonical entries, filtered by key group."""

from __future__ import annotations

from typing import Iterator, Sequence

from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.keygroups import KeyGroupRange
from tidemark.state.rocksdb.snapshot import read_incremental
from tidemark.state.snapshot import RestoredPart, SnapshotReader
from tidemark.storage.base import CheckpointStorage


def overlapping(handles: Sequence[StateHandle], key_groups: KeyGroupRange) -> list[StateHandle]:
    """Keyed handles whose key-group range intersects ``key_groups``."""
    keyed = (StateHandleKind.KEYED_FULL, StateHandleKind.KEYED_INCREMENTAL,
             StateHandleKind.MATERIALIZED)
    result = []
    for handle in handles:
        if handle.kind not in keyed:
            raise ValueError(f"not a keyed state handle: {handle.kind.value}")
        their = KeyGroupRange(handle.key_group_start, handle.key_group_end)
        if len(their.intersection(key_groups)):
            result.append(handle)
    return result


def read_handle(
    handle: StateHandle, storage: CheckpointStorage, key_groups: KeyGroupRange
) -> Iterator[RestoredPart]:
    """Every part of ``handle`` as canonical entries inside ``key_groups``.

    Files are read with ``read_verified``: a corrupted file raises ``CorruptStateFile``
    naming it.
    """
    if handle.kind is StateHandleKind.KEYED_INCREMENTAL:
        yield from read_incremental(handle, storage, key_groups)
        return
    for ref in handle.files:
        reader = SnapshotReader.parse(storage.read_verified(ref), ref.path)
        yield RestoredPart(ref.path, reader.states, reader.entries(key_groups))
