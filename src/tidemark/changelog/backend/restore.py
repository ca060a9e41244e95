"""The changelog backend's snapshots and their restore: materialized snapshots, then exactly the
changelog ranges.

A changelog snapshot (:class:`~tidemark.state.backend.KeyedSnapshot`) holds no state files of its
own: the handles of the latest materialization (shared files), the changelog ranges applied on top
and the materialization they start after. The ranges are written by the changelog writer
(:mod:`tidemark.changelog.writer`) and read back by :mod:`tidemark.changelog.reader`.

``restore_from_changelog(backend, sources, storage, reader)`` fills a fresh keyed backend (no
state registered, nothing applied yet) with the state of its key groups at the checkpoint the
``sources`` come from (one per old task; several after rescaling):

1. the materialized handles of every source, each only for the source's key groups: a handle
   lying inside its source's key groups goes through the backend's own ``restore`` (native
   RocksDB files, state metadata checked); a wider one - carried by a task restored after
   rescaling - is read entry by entry, clipped to the source's key groups;
2. then the records of the sources' ranges, as :class:`~tidemark.changelog.reader.ChangelogReader`
   selects them, applied with ``backend.apply_change`` (change listeners are not notified); the
   state definitions logged in the ranges are recorded with ``backend.restore_state_metas``,
   so registering a state afterwards is checked against them, as after a snapshot restore.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.changelog.reader import ChangelogReader, ReadStats
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateChangeOp, StateHandle
from tidemark.state.backend import KeyedSnapshot, KeyedStateBackend
from tidemark.state.restore import read_handle
from tidemark.state.table import KeyedStateChange
from tidemark.storage.base import CheckpointStorage


@dataclass(frozen=True, slots=True)
class RestoreResult:
    native_handles: tuple[StateHandle, ...]  # restored through backend.restore
    clipped_handles: int  # handles read entry by entry, clipped to their source
    clipped_entries: int
    changelog: ReadStats


def is_shareable(handles: Sequence[StateHandle]) -> bool:
    """True when every file of ``handles`` is shared, so any number of checkpoints may reference it."""
    return all(f.shared for h in handles for f in h.files)


def _handle_range(handle: StateHandle) -> KeyGroupRange:
    return KeyGroupRange(handle.key_group_start, handle.key_group_end)


def plan_handles(
    sources: Sequence[KeyedSnapshot], target: KeyGroupRange
) -> tuple[list[StateHandle], list[tuple[StateHandle, KeyGroupRange]]]:
    """(handles the backend restores natively, (handle, clip) pairs to read entry by entry)."""
    native: list[StateHandle] = []
    clipped: list[tuple[StateHandle, KeyGroupRange]] = []
    for source in sources:
        clip = source.key_groups.intersection(target)
        for handle in source.handles:
            their = _handle_range(handle)
            if not len(their.intersection(clip)):
                continue
            inside = source.key_groups.start <= their.start and their.end <= source.key_groups.end
            if inside and handle not in native:
                native.append(handle)
            elif not inside:
                clipped.append((handle, clip.intersection(their)))
    return native, clipped


def restore_from_changelog(
    backend: KeyedStateBackend,
    sources: Sequence[KeyedSnapshot],
    storage: CheckpointStorage,
    reader: ChangelogReader,
) -> RestoreResult:
    """Restore ``backend``'s key groups from ``sources`` (see the module docstring)."""
    target = backend.key_group_range
    native, clipped = plan_handles(sources, target)
    if native:
        backend.restore([KeyedSnapshot(target, tuple(native))], storage)
    entries = 0
    for handle, clip in clipped:
        for part in read_handle(handle, storage, clip):
            backend.restore_state_metas(part.states, part.source, (clip,))
            for e in part.entries:
                backend.apply_change(KeyedStateChange(e.state_name, e.key_group, e.key, e.namespace,
                                                      StateChangeOp.PUT, e.user_key, e.value))
                entries += 1
    def on_state_meta(meta: dict[str, Any], key_groups: tuple[KeyGroupRange, ...]) -> None:
        backend.restore_state_metas([meta], "changelog", key_groups)

    for change in reader.read(sources, target, on_state_meta=on_state_meta):
        backend.apply_change(change)
    return RestoreResult(tuple(native), len(clipped), entries, reader.last_stats)
