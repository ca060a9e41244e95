"""The keyed-state contract for a value written many times between snapshots (RocksDB keeps such
writes in a write buffer until a snapshot or another read of its column family; every backend
must look the same from outside): what a get, a key listing, a TTL cleanup and a snapshot see
(the buffer itself: ``tests/unit/state/test_state_rocksdb_write_buffer.py``)."""

from __future__ import annotations

import pytest

from tidemark.state import ValueStateDescriptor
from tidemark.state.ttl import StateTtlConfig
from tidemark.types import CheckpointId

ALL_KINDS = ("heap", "rocksdb", "changelog")


def _read(backend, state, keys):
    values = {}
    for key in keys:
        backend.set_current_key(key)
        values[key] = state.value()
    return values


def test_the_last_of_many_writes_is_read_listed_and_snapshotted(new_backend, storage) -> None:
    source = new_backend()
    state = source.get_state(ValueStateDescriptor("count", default=0))
    for n in range(1, 301):
        source.set_current_key(f"k{n % 7}")
        state.update(state.value() + 1)
    expected = {f"k{i}": (43 if i <= 6 and i != 0 else 42) for i in range(7)}
    assert _read(source, state, expected) == expected
    assert sorted(source.keys("count")) == sorted(expected)
    snapshot = source.snapshot(CheckpointId(1), storage)
    for n in range(5):  # after the barrier: not in the snapshot
        source.set_current_key("k1")
        state.update(-n)
    target = new_backend()
    target.restore([snapshot], storage)
    assert _read(target, target.get_state(ValueStateDescriptor("count", default=0)), expected) == expected


@pytest.mark.parametrize("value", [None, True, 7, 2.5, "s", b"b", (1, "x", None), 10**30])
def test_values_read_back_as_written_before_and_after_a_snapshot(new_backend, storage, value) -> None:
    source = new_backend()
    state = source.get_state(ValueStateDescriptor("v", default="unset"))
    source.set_current_key("a")
    state.update(value)
    read = state.value()
    assert read == (value if value is not None else "unset")
    assert value is None or type(read) is type(value)
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        restored = target.get_state(ValueStateDescriptor("v", default="unset"))
        target.set_current_key("a")
        assert restored.value() == read and type(restored.value()) is type(read)


def test_a_cleared_value_stays_cleared_after_writes_and_a_snapshot(new_backend, storage) -> None:
    source = new_backend()
    state = source.get_state(ValueStateDescriptor("v"))
    for key in ("a", "b"):
        source.set_current_key(key)
        state.update(1)
        state.update(2)
    source.set_current_key("a")
    state.clear()
    assert state.value() is None and list(source.keys("v")) == ["b"]
    snapshot = source.snapshot(CheckpointId(1), storage)
    target = new_backend()
    target.restore([snapshot], storage)
    assert _read(target, target.get_state(ValueStateDescriptor("v")), ["a", "b"]) == {"a": None, "b": 2}


def test_a_cleanup_sees_the_last_write_of_a_value(backend, clock) -> None:
    config = StateTtlConfig(10, visibility="return_expired_if_not_cleaned_up")
    state = backend.get_state(ValueStateDescriptor("v", ttl=config))
    backend.set_current_key("old")
    state.update(1)
    clock.advance(6_000)
    backend.set_current_key("fresh")
    state.update(1)
    backend.set_current_key("old")
    state.update(2)  # refreshed: no longer expiring with the first write
    clock.advance(5_000)
    assert backend.cleanup_expired_state() == 0
    backend.set_current_key("old")
    assert state.value() == 2
