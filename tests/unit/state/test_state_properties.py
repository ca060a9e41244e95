"""Property tests: random operation sequences leave the same visible state on both backends,
and the same state again after snapshot -> restore -> rescale (in either backend)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from state_operations import DESCRIPTORS, apply_ops
from tidemark.state import (
    HashMapStateBackend,
    KeyGroupRange,
    KeyNotInRangeError,
    RocksDBOptions,
    RocksDBStateBackend,
    compute_key_group_range,
)
from tidemark.storage.filesystem import FilesystemCheckpointStorage

MAX_P = 16
KEYS = st.one_of(st.integers(-50, 50), st.sampled_from(["a", "b", "ü", ""]), st.binary(max_size=3))
NAMESPACES = st.sampled_from([None, "w1", ("w", 2)])
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
              st.floats(allow_nan=False), st.text(max_size=5), st.binary(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=6,
)
USER_KEYS = st.one_of(st.text(max_size=3), st.integers(-5, 5))
OPS = st.lists(st.one_of(
    st.tuples(st.just("value.update"), KEYS, NAMESPACES, VALUES),
    st.tuples(st.just("value.clear"), KEYS, NAMESPACES),
    st.tuples(st.just("list.add"), KEYS, NAMESPACES, VALUES.filter(lambda v: v is not None)),
    st.tuples(st.just("list.update"), KEYS, NAMESPACES,
              st.lists(st.integers(), max_size=3)),
    st.tuples(st.just("map.put"), KEYS, NAMESPACES, USER_KEYS, VALUES),
    st.tuples(st.just("map.remove"), KEYS, NAMESPACES, USER_KEYS),
    st.tuples(st.just("map.clear"), KEYS, NAMESPACES),
    st.tuples(st.just("sum.add"), KEYS, NAMESPACES, st.integers(-100, 100)),
), max_size=40)

SMALL = RocksDBOptions(block_cache_bytes=4 << 20, write_buffer_total_bytes=4 << 20,
                       write_buffer_bytes=1 << 20)


def visible(backend, keys, namespaces) -> dict:
    """Everything a user can read for ``keys`` that belong to this backend."""
    states = {name: backend.get_state(d) for name, d in DESCRIPTORS.items()}
    seen = {}
    for key in keys:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        for ns in namespaces:
            for state in states.values():
                state.set_current_namespace(ns)
            row = (states["value"].value(), states["list"].get(),
                   sorted(states["map"].items(), key=repr), states["sum"].get())
            if row != (None, [], [], None):
                seen[(repr(key), repr(ns))] = row
    return seen


def make(kind: str, base: Path, key_groups: KeyGroupRange):
    if kind == "heap":
        return HashMapStateBackend(key_groups, MAX_P)
    return RocksDBStateBackend(Path(tempfile.mkdtemp(dir=base)), key_groups, MAX_P, options=SMALL)


def key_universe(ops) -> list:
    return list({(type(op[1]), op[1]): op[1] for op in ops}.values())


PROPERTY_SETTINGS = settings(max_examples=40, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(ops=OPS)
def test_same_visible_state_on_both_backends(ops) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        full = KeyGroupRange(0, MAX_P - 1)
        heap, rocks = make("heap", Path(tmp), full), make("rocksdb", Path(tmp), full)
        try:
            apply_ops(heap, ops)
            apply_ops(rocks, ops)
            keys, namespaces = key_universe(ops), [None, "w1", ("w", 2)]
            assert visible(heap, keys, namespaces) == visible(rocks, keys, namespaces)
        finally:
            heap.close()
            rocks.close()


@PROPERTY_SETTINGS
@given(ops=OPS, old_p=st.integers(1, 4), new_p=st.integers(1, 5),
       kinds=st.tuples(st.sampled_from(["heap", "rocksdb"]), st.sampled_from(["heap", "rocksdb"])))
def test_snapshot_restore_rescale_preserves_visible_state(ops, old_p, new_p, kinds) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        storage = FilesystemCheckpointStorage(base / "chk")
        keys, namespaces = key_universe(ops), [None, "w1", ("w", 2)]
        reference = make("heap", base, KeyGroupRange(0, MAX_P - 1))
        apply_ops(reference, ops)
        expected = visible(reference, keys, namespaces)
        reference.close()
        snapshots, after = [], {}
        for index in range(old_p):
            backend = make(kinds[0], base, compute_key_group_range(MAX_P, old_p, index))
            mine = [op for op in ops if _owns(backend, op[1])]
            apply_ops(backend, mine)
            snapshots.append(backend.snapshot(1, storage))
            backend.close()
        for index in range(new_p):
            backend = make(kinds[1], base, compute_key_group_range(MAX_P, new_p, index))
            backend.restore(snapshots, storage)
            part = visible(backend, keys, namespaces)
            assert not set(part) & set(after)  # each key restored by exactly one subtask
            after.update(part)
            backend.close()
        assert after == expected


def _owns(backend, key) -> bool:
    try:
        backend.set_current_key(key)
    except KeyNotInRangeError:
        return False
    return True
