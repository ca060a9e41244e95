"""RocksDB's write buffer in front of a value state's column family (``RocksValueTable``): what
waits in it, what goes to RocksDB at once, and when it is written."""

from __future__ import annotations

import pytest

from tidemark.state import AvroSerializer, ValueStateDescriptor
from tidemark.state.rocksdb import table as rocks_table
from tidemark.state.serializers import SerializationError
from tidemark.types import CheckpointId


@pytest.fixture
def rocks(new_backend):
    return new_backend(kind="rocksdb")


def _stored(backend, name: str) -> int:
    """Entries in the state's column family (what RocksDB holds, not what the buffer holds)."""
    return sum(1 for _ in backend._cf(name).keys())


def test_immutable_values_wait_in_the_buffer_until_a_snapshot(rocks, storage) -> None:
    state = rocks.get_state(ValueStateDescriptor("count", default=0))
    for n in range(1000):
        rocks.set_current_key(n % 10)
        state.update(state.value() + 1)
    assert _stored(rocks, "count") == 0
    rocks.snapshot(CheckpointId(1), storage)
    assert _stored(rocks, "count") == 10


def test_a_full_buffer_writes_itself(rocks, monkeypatch) -> None:
    monkeypatch.setattr(rocks_table, "WRITE_BUFFER_ENTRIES", 5)
    state = rocks.get_state(ValueStateDescriptor("v"))
    for key in range(12):
        rocks.set_current_key(key)
        state.update(key)
    assert _stored(rocks, "v") == 10  # two buffers of 5 written, 2 keys waiting
    assert [(rocks.set_current_key(key), state.value())[1] for key in range(12)] == list(range(12))


def test_mutable_values_go_to_rocksdb_at_once_and_are_read_back_as_copies(rocks) -> None:
    state = rocks.get_state(ValueStateDescriptor("v"))
    rocks.set_current_key("a")
    state.update(1)  # buffered, then replaced by a value written at once
    items = [1, 2]
    state.update(items)
    assert _stored(rocks, "v") == 1
    items.append(3)  # changed in place after the update: not stored
    read = state.value()
    assert read == [1, 2]
    read.append(4)
    assert state.value() == [1, 2]


def test_values_of_another_codec_go_to_rocksdb_at_once(rocks) -> None:
    state = rocks.get_state(ValueStateDescriptor("n", serializer=AvroSerializer({"type": "double"})))
    rocks.set_current_key("a")
    state.update(1)
    assert _stored(rocks, "n") == 1
    assert state.value() == 1.0 and type(state.value()) is float  # the codec's type, as stored


def test_a_value_the_codec_refuses_fails_its_update_and_keeps_the_value_before(rocks) -> None:
    state = rocks.get_state(ValueStateDescriptor("t"))
    rocks.set_current_key("a")
    state.update(1)
    with pytest.raises(SerializationError):
        state.update(object())
    assert state.value() == 1


def test_with_a_change_listener_every_write_goes_to_rocksdb_and_the_listener_at_once(rocks) -> None:
    state = rocks.get_state(ValueStateDescriptor("v"))
    rocks.set_current_key("a")
    state.update(1)  # buffered before the listener: written when the listener comes, not told
    changes = []
    rocks.add_change_listener(changes.append)
    assert _stored(rocks, "v") == 1 and changes == []
    rocks.set_current_key("b")
    state.update(2)
    assert _stored(rocks, "v") == 2 and len(changes) == 1


def test_a_buffer_written_while_a_capture_is_held_stays_out_of_the_checkpoint(new_backend, storage, capture_held,
                                                                          monkeypatch) -> None:
    """After the barrier a full buffer writes into the live database while the capture thread
    waits: the capture keeps what those writes replace."""
    monkeypatch.setattr(rocks_table, "WRITE_BUFFER_ENTRIES", 3)
    source = new_backend(kind="rocksdb")
    state = source.get_state(ValueStateDescriptor("v"))
    for key in range(6):
        source.set_current_key(key)
        state.update(key)
    pending = source.snapshot_async(CheckpointId(1), storage)
    for key in range(9):
        source.set_current_key(key)
        state.update(100 + key)
    assert _stored(source, "v") == 9
    capture_held.set()
    snapshot = pending.run()
    target = new_backend(kind="rocksdb")
    target.restore([snapshot], storage)
    restored = target.get_state(ValueStateDescriptor("v"))
    seen = {}
    for key in range(9):
        target.set_current_key(key)
        seen[key] = restored.value()
    assert seen == {key: (key if key < 6 else None) for key in range(9)}
