"""The keyed-state contract: state kinds, key-group scoping, change listeners, snapshot and restore."""

from __future__ import annotations

import pytest

from tidemark.protocol.messages import StateChangeOp, StateHandleKind
from tidemark.state import (
    AggregatingStateDescriptor,
    AvroSerializer,
    KeyGroupRange,
    KeyNotInRangeError,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateRegistrationError,
    ValueStateDescriptor,
    assign_to_key_group,
)
from tidemark.state.table import KeyedStateChange
from tidemark.types import CheckpointId

ALL_KINDS = ("heap", "rocksdb", "changelog")


class Average:
    """An AggregateFunction computing a mean."""

    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]

    def merge(self, a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
        return (a[0] + b[0], a[1] + b[1])


def test_value_state(backend) -> None:
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    backend.set_current_key("a")
    assert state.value() == 0
    state.update(5)
    backend.set_current_key("b")
    assert state.value() == 0
    state.update({"nested": [1, b"x", (2, None)]})
    assert state.value() == {"nested": [1, b"x", (2, None)]}
    backend.set_current_key("a")
    assert state.value() == 5
    state.clear()
    assert state.value() == 0
    state.update(7)
    state.update(None)
    assert state.value() == 0


def test_list_state(backend) -> None:
    state = backend.get_state(ListStateDescriptor("events"))
    backend.set_current_key(1)
    assert state.get() == []
    state.add("x")
    state.add_all([1, 2.5])
    assert state.get() == ["x", 1, 2.5]
    state.update([b"only"])
    assert state.get() == [b"only"]
    state.update([])
    assert state.get() == []
    with pytest.raises(ValueError):
        state.add(None)


def test_map_state(backend) -> None:
    state = backend.get_state(MapStateDescriptor("index"))
    backend.set_current_key(b"k")
    assert state.is_empty() and state.get("missing") is None and not state.contains("x")
    state.put("x", 1)
    state.put_all({"y": None, "z": [3]})
    assert state.contains("y") and state.get("y") is None
    assert dict(state.items()) == {"x": 1, "y": None, "z": [3]}
    assert sorted(state.keys()) == ["x", "y", "z"]
    assert sorted(map(str, state.values())) == ["1", "None", "[3]"]
    state.remove("x")
    assert not state.contains("x")
    backend.set_current_key(b"other")
    assert state.is_empty()
    backend.set_current_key(b"k")
    state.clear()
    assert state.is_empty()


def test_reducing_and_aggregating_state(backend) -> None:
    total = backend.get_state(ReducingStateDescriptor("sum", lambda a, b: a + b))
    mean = backend.get_state(AggregatingStateDescriptor("mean", Average()))
    backend.set_current_key("k")
    assert total.get() is None and mean.get() is None
    for value in (1, 2, 6):
        total.add(value)
        mean.add(value)
    assert total.get() == 9 and mean.get() == 3.0
    total.clear()
    assert total.get() is None


def test_namespaces_are_independent(backend) -> None:
    state = backend.get_state(ListStateDescriptor("window-contents"))
    backend.set_current_key("k")
    state.set_current_namespace(("window", 0, 10))
    state.add(1)
    state.set_current_namespace(("window", 10, 20))
    state.add(2)
    assert state.get() == [2]
    state.set_current_namespace(("window", 0, 10))
    assert state.get() == [1]
    state.clear()
    state.set_current_namespace(None)
    assert state.get() == []


def test_avro_serializer(backend) -> None:
    schema = {"type": "record", "name": "Point", "fields": [
        {"name": "x", "type": "int"}, {"name": "label", "type": "string"}]}
    state = backend.get_state(ValueStateDescriptor("point", serializer=AvroSerializer(schema)))
    backend.set_current_key("k")
    state.update({"x": 3, "label": "p"})
    assert state.value() == {"x": 3, "label": "p"}


def test_key_outside_range_is_refused(new_backend) -> None:
    backend = new_backend(KeyGroupRange(0, 63), 128)
    outside = next(k for k in range(1000) if assign_to_key_group(k, 128) >= 64)
    with pytest.raises(KeyNotInRangeError):
        backend.set_current_key(outside)
    with pytest.raises(TypeError):
        backend.set_current_key(1.5)


def test_current_key_and_key_group(backend) -> None:
    backend.set_current_key("user-1")
    assert backend.get_current_key() == "user-1"
    assert backend.current_key_group == assign_to_key_group("user-1", 128)
    backend.set_current_key(1)
    assert backend.get_current_key() == 1


def test_registration_conflicts(backend) -> None:
    first = backend.get_state(ValueStateDescriptor("s"))
    assert backend.get_state(ValueStateDescriptor("s")) is first
    with pytest.raises(StateRegistrationError):
        backend.get_state(ListStateDescriptor("s"))


def test_changes_are_observed_and_replayable(new_backend) -> None:
    source, mirror = new_backend(), new_backend()
    changes: list[KeyedStateChange] = []
    source.add_change_listener(changes.append)
    descriptors = [ValueStateDescriptor("v"), ListStateDescriptor("l"), MapStateDescriptor("m")]
    v, lst, m = (source.get_state(d) for d in descriptors)
    for key in ("a", "b"):
        source.set_current_key(key)
        v.update(key * 2)
        lst.add(1)
        lst.add_all([2, 3])
        m.put("x", 1)
        m.put("y", 2)
        m.remove("x")
    source.set_current_key("b")
    v.clear()
    lst.update([9])
    m.clear()
    ops = {c.op for c in changes}
    assert ops == {StateChangeOp.PUT, StateChangeOp.ADD, StateChangeOp.DELETE, StateChangeOp.CLEAR}
    assert all(c.key_group == assign_to_key_group(c.key[1:].decode(), 128) for c in changes)
    for change in changes:  # through the wire record, as the changelog will do
        mirror.apply_change(KeyedStateChange.from_message(change.to_message("job", "op#0")))
    mv, ml, mm = (mirror.get_state(d) for d in descriptors)
    for key in ("a", "b"):
        mirror.set_current_key(key)
        source.set_current_key(key)
        assert (mv.value(), ml.get(), dict(mm.items())) == (v.value(), lst.get(), dict(m.items()))
    mirror.set_current_key("a")
    assert (mv.value(), ml.get(), dict(mm.items())) == ("aa", [1, 2, 3], {"y": 2})


def _fill(source) -> None:
    v = source.get_state(ValueStateDescriptor("v", default=-1))
    m = source.get_state(MapStateDescriptor("m"))
    for key in range(200):
        source.set_current_key(key)
        v.update(key * 10)
        m.put(key % 7, str(key))


def _check(target) -> None:
    tv = target.get_state(ValueStateDescriptor("v", default=-1))
    tm = target.get_state(MapStateDescriptor("m"))
    for key in range(200):
        target.set_current_key(key)
        assert tv.value() == key * 10 and dict(tm.items()) == {key % 7: str(key)}


def test_checkpoint_snapshot_restores_into_the_same_backend(new_backend, storage) -> None:
    source = new_backend()
    _fill(source)
    snapshot = source.snapshot(CheckpointId(1), storage)
    assert snapshot.key_groups == source.key_group_range
    target = new_backend()
    target.restore([snapshot], storage)
    _check(target)


def test_canonical_snapshot_restores_into_every_backend(new_backend, storage) -> None:
    source = new_backend()
    _fill(source)
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)
    assert snapshot.ranges == () and snapshot.materialization is None
    assert [h.kind for h in snapshot.handles] == [StateHandleKind.KEYED_FULL]
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        _check(target)
        assert target.rebased is (kind == "changelog")  # a savepoint's files are not the changelog's


def test_snapshots_repeat_and_the_latest_restores(new_backend, storage) -> None:
    source = new_backend()
    state = source.get_state(ValueStateDescriptor("v"))
    source.set_current_key("k")
    state.update(1)
    first = source.snapshot(CheckpointId(1), storage)
    assert source.notify_checkpoint_complete(CheckpointId(1)) in (True, False)
    state.update(2)
    second = source.snapshot(CheckpointId(2), storage)
    for snapshot, expected in ((first, 1), (second, 2)):
        target = new_backend()
        target.restore([snapshot], storage)
        target.set_current_key("k")
        assert target.get_state(ValueStateDescriptor("v")).value() == expected


def test_restore_refuses_a_different_definition(new_backend, storage) -> None:
    source = new_backend()
    source.get_state(ValueStateDescriptor("v"))
    source.set_current_key("k")
    source.get_state(ValueStateDescriptor("v")).update(1)
    snapshot = source.snapshot(CheckpointId(1), storage)
    target = new_backend()
    target.restore([snapshot], storage)
    with pytest.raises(StateRegistrationError):
        target.get_state(ListStateDescriptor("v"))


def test_unregistered_restored_state_survives_the_next_snapshot(new_backend, storage) -> None:
    source = new_backend()
    source.set_current_key("k")
    source.get_state(ListStateDescriptor("l")).add_all([1, 2])
    middle = new_backend()
    middle.restore([source.snapshot(CheckpointId(1), storage)], storage)
    snapshot = middle.snapshot(CheckpointId(2), storage)  # "l" never registered on middle
    final = new_backend()
    final.restore([snapshot], storage)
    final.set_current_key("k")
    assert final.get_state(ListStateDescriptor("l")).get() == [1, 2]


def test_restore_after_registration_is_refused(new_backend, storage) -> None:
    source = new_backend()
    snapshot = source.snapshot(CheckpointId(1), storage)
    target = new_backend()
    target.get_state(ValueStateDescriptor("v"))
    with pytest.raises(StateRegistrationError):
        target.restore([snapshot], storage)


def test_closed_backend_refuses_use(new_backend) -> None:
    backend = new_backend()
    backend.close()
    with pytest.raises(RuntimeError):
        backend.get_state(ValueStateDescriptor("v"))
    backend.close()


def test_size_reports_each_state_s_entries_and_bytes(backend) -> None:
    """A value per key, a two-element list per key (one entry), three map entries per key: the
    entries counted (RocksDB: its estimate, at least the entries and at most one per write),
    the bytes at least what the values themselves take; RocksDB's own figures on RocksDB only."""
    values = backend.get_state(ValueStateDescriptor("value", default=0))
    lists = backend.get_state(ListStateDescriptor("list"))
    maps = backend.get_state(MapStateDescriptor("map"))
    backend.get_state(ValueStateDescriptor("unused"))
    for key in range(40):
        backend.set_current_key(f"key-{key}")
        values.update("v" * 30)
        lists.add_all([key, key + 1])
        maps.put_all({f"entry-{n}": "m" * 50 for n in range(3)})
    size = backend.size()
    assert set(size.states) == {"value", "list", "map", "unused"}
    rocksdb = size.block_cache_bytes is not None
    for name, entries, writes in (("value", 40, 40), ("list", 40, 40), ("map", 120, 120)):
        measured = size.states[name].entries
        assert (entries <= measured <= writes * 2) if rocksdb else measured == entries, (name, measured)
    assert size.states["unused"].entries == 0  # RocksDB: an empty memtable's arena (2 KB) still counts
    assert size.states["unused"].bytes <= (4096 if rocksdb else 0)
    assert size.states["value"].bytes >= 40 * 30 and size.states["map"].bytes >= 120 * 50
    for state in size.states.values():
        figures = (state.live_sst_bytes, state.memtable_bytes, state.pending_compaction_bytes)
        assert all(f is not None and f >= 0 for f in figures) if rocksdb else figures == (None, None, None)
        if rocksdb:
            assert state.bytes == state.live_sst_bytes + state.memtable_bytes
