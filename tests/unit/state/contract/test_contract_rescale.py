"""The rescaling contract: N instances' snapshots restored into M, each key exactly once.

Every backend restores the snapshots of the old instances whose key groups overlap its own
(as the stage restore picks them) and keeps only its own key groups: splitting (3 -> 5) and
merging (3 -> 2), from checkpoint snapshots of its own kind and from canonical snapshots of
every kind.
"""

from __future__ import annotations

import pytest

from tidemark.state import (
    KeyNotInRangeError,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
    compute_key_group_range,
)
from tidemark.state.rescale import keyed_handles_for_subtask
from tidemark.types import CheckpointId

MAX_P = 128
KEYS = [f"user-{i}" for i in range(600)] + list(range(-200, 200)) + [b"\x00raw", b"bytes-key"]
DESCRIPTORS = (ValueStateDescriptor("v"), ListStateDescriptor("l"), MapStateDescriptor("m"))


def expected(key):
    return (repr(key), [key, len(repr(key))], {"k": key})


def write_at_parallelism(new_backend, storage, kinds, parallelism, checkpoint_id, *, canonical=False):
    snapshots = []
    for index in range(parallelism):
        backend = new_backend(compute_key_group_range(MAX_P, parallelism, index), MAX_P,
                              kind=kinds[index % len(kinds)] if kinds else None, operator_id="op")
        v, lst, m = (backend.get_state(d) for d in DESCRIPTORS)
        for key in KEYS:
            try:
                backend.set_current_key(key)
            except KeyNotInRangeError:
                continue
            value, items, mapping = expected(key)
            v.update(value)
            lst.update(items)
            m.put_all(mapping)
        snapshots.append(backend.snapshot(CheckpointId(checkpoint_id), storage, canonical=canonical))
    return snapshots


def read_at_parallelism(new_backend, storage, snapshots, kinds, parallelism):
    seen: dict[object, list[tuple]] = {}
    for index in range(parallelism):
        key_groups = compute_key_group_range(MAX_P, parallelism, index)
        backend = new_backend(key_groups, MAX_P, kind=kinds[index % len(kinds)] if kinds else None,
                              operator_id="op")
        backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
        v, lst, m = (backend.get_state(d) for d in DESCRIPTORS)
        for key in KEYS:
            try:
                backend.set_current_key(key)
            except KeyNotInRangeError:
                continue
            if v.value() is not None:
                seen.setdefault(key, []).append((v.value(), lst.get(), dict(m.items())))
        # no key from another subtask's range leaked in through the restore
        assert all(kg in key_groups for kg in _stored_key_groups(backend))
    return seen


def _stored_key_groups(backend):
    backend = getattr(backend, "backend", backend)  # the changelog backend's wrapped one
    groups = set()
    for table in getattr(backend, "_tables", {}).values():
        if hasattr(table, "_maps"):
            start = backend.key_group_range.start
            groups |= {start + i for i, m in enumerate(table._maps) if m}
        else:
            groups |= {int.from_bytes(k[:2], "big") for k in table._cf.keys()}
    return groups


def _assert_every_key_once(seen) -> None:
    assert set(seen) == set(KEYS)
    for key, copies in seen.items():
        assert copies == [expected(key)], key


@pytest.mark.parametrize("new_parallelism", [2, 5])
def test_rescale_from_3_keeps_every_key_exactly_once(new_backend, storage, new_parallelism) -> None:
    snapshots = write_at_parallelism(new_backend, storage, None, 3, 1)
    assert len(snapshots) == 3
    seen = read_at_parallelism(new_backend, storage, snapshots, None, new_parallelism)
    _assert_every_key_once(seen)


@pytest.mark.parametrize("new_parallelism", [2, 5])
def test_rescale_from_canonical_snapshots_of_every_kind(new_backend, storage, new_parallelism) -> None:
    snapshots = write_at_parallelism(new_backend, storage, ["heap", "rocksdb", "changelog"], 3, 1,
                                     canonical=True)
    seen = read_at_parallelism(new_backend, storage, snapshots, None, new_parallelism)
    _assert_every_key_once(seen)


def test_handles_for_subtask_selects_overlapping_ranges(new_backend, storage) -> None:
    snapshots = write_at_parallelism(new_backend, storage, ["heap"], 3, 7)
    handles = [h for s in snapshots for h in s.handles]
    key_groups, mine = keyed_handles_for_subtask(handles, MAX_P, 5, 1)
    assert (key_groups.start, key_groups.end) == (26, 51)
    assert [(h.key_group_start, h.key_group_end) for h in mine] == [(0, 42), (43, 85)]
