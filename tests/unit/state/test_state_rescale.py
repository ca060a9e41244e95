"""Rescaling keyed state: N instances' snapshots restored into M, each key exactly once."""

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

MAX_P = 128
KEYS = [f"user-{i}" for i in range(600)] + list(range(-200, 200)) + [b"\x00raw", b"bytes-key"]
DESCRIPTORS = (ValueStateDescriptor("v"), ListStateDescriptor("l"), MapStateDescriptor("m"))


def expected(key):
    return (repr(key), [key, len(repr(key))], {"k": key})


def write_at_parallelism(new_backend, storage, kinds, parallelism, checkpoint_id):
    handles = []
    for index in range(parallelism):
        backend = new_backend(compute_key_group_range(MAX_P, parallelism, index), MAX_P,
                              kind=kinds[index % len(kinds)], operator_id="op")
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
        handles += backend.snapshot(checkpoint_id, storage)
    return handles


def read_at_parallelism(new_backend, storage, handles, kinds, parallelism):
    seen: dict[object, list[tuple]] = {}
    for index in range(parallelism):
        key_groups, mine = keyed_handles_for_subtask(handles, MAX_P, parallelism, index)
        backend = new_backend(key_groups, MAX_P, kind=kinds[index % len(kinds)], operator_id="op")
        backend.restore(mine, storage)
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
    handles_storage = getattr(backend, "_tables", {})
    groups = set()
    for table in handles_storage.values():
        if hasattr(table, "_maps"):
            start = backend.key_group_range.start
            groups |= {start + i for i, m in enumerate(table._maps) if m}
        else:
            groups |= {int.from_bytes(k[:2], "big") for k in table._cf.keys()}
    return groups


@pytest.mark.parametrize("new_parallelism", [2, 5])
@pytest.mark.parametrize(("old_kinds", "new_kinds"), [
    (["heap"], ["heap"]),
    (["rocksdb"], ["rocksdb"]),
    (["heap", "rocksdb"], ["rocksdb", "heap"]),
])
def test_rescale_from_3_keeps_every_key_exactly_once(
    new_backend, storage, old_kinds, new_kinds, new_parallelism
) -> None:
    handles = write_at_parallelism(new_backend, storage, old_kinds, 3, 1)
    assert len(handles) == 3
    seen = read_at_parallelism(new_backend, storage, handles, new_kinds, new_parallelism)
    assert set(seen) == set(KEYS)
    for key, copies in seen.items():
        assert copies == [expected(key)], key


def test_handles_for_subtask_selects_overlapping_ranges(new_backend, storage) -> None:
    handles = write_at_parallelism(new_backend, storage, ["heap"], 3, 7)
    key_groups, mine = keyed_handles_for_subtask(handles, MAX_P, 5, 1)
    assert (key_groups.start, key_groups.end) == (26, 51)
    assert [(h.key_group_start, h.key_group_end) for h in mine] == [(0, 42), (43, 85)]
