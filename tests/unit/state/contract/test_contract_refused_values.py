"""The keyed-state contract for a value its serializer cannot encode: every backend refuses it at
the write, with the serializer's error, and keeps what was there, so the record that wrote it
fails alone (its error policy decides) and every later snapshot still succeeds. (A heap backend
that took it would keep it unencoded until the next snapshot, which would then fail at every
checkpoint, and a restart would replay the same record.)"""

from __future__ import annotations

import pytest

from tidemark.state import (
    AvroSerializer,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from tidemark.state.serializers import SerializationError
from tidemark.state.ttl import StateTtlConfig
from tidemark.types import CheckpointId

TTL = StateTtlConfig(ttl_seconds=60)


def _value(backend, descriptor):
    state = backend.get_state(descriptor)
    return state, state.update, state.value


def _list(backend, descriptor):
    state = backend.get_state(descriptor)
    return state, state.add, lambda: list(state.get())


def _list_replaced(backend, descriptor):
    state = backend.get_state(descriptor)
    return state, lambda value: state.update([value]), lambda: list(state.get())


def _map_value(backend, descriptor):
    state = backend.get_state(descriptor)
    return state, lambda value: state.put("k", value), lambda: dict(state.items())


def _map_key(backend, descriptor):
    state = backend.get_state(descriptor)
    return state, lambda value: state.put(value, 1), lambda: dict(state.items())


CASES = [  # (id, descriptor, access, a good value, a refused value)
    ("value-default-set", ValueStateDescriptor("v"), _value, 1, {1, 2}),
    ("value-default-object", ValueStateDescriptor("v"), _value, "a", object()),
    ("value-default-nested", ValueStateDescriptor("v"), _value, [1, 2], [1, {3}]),
    ("value-default-ttl", ValueStateDescriptor("v", ttl=TTL), _value, 2.5, {1}),
    ("value-avro-long", ValueStateDescriptor("v", serializer=AvroSerializer('"long"')), _value, 7, "seven"),
    ("value-avro-ttl", ValueStateDescriptor("v", serializer=AvroSerializer('"long"'), ttl=TTL), _value, 7, "x"),
    ("list-add", ListStateDescriptor("l"), _list, 1, {1}),
    ("list-update", ListStateDescriptor("l"), _list_replaced, 1, {1}),
    ("list-avro-ttl", ListStateDescriptor("l", serializer=AvroSerializer('"string"'), ttl=TTL), _list, "a", 3),
    ("map-value", MapStateDescriptor("m"), _map_value, 1, {1}),
    ("map-value-avro", MapStateDescriptor("m", value_serializer=AvroSerializer('"int"')), _map_value, 1, 2**40),
    ("map-key", MapStateDescriptor("m"), _map_key, "a", frozenset({1})),
    ("map-key-avro", MapStateDescriptor("m", key_serializer=AvroSerializer('"string"')), _map_key, "a", 5),
]


@pytest.mark.parametrize(("descriptor", "access", "good", "refused"),
                         [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_value_the_serializer_refuses_fails_its_write_and_later_snapshots_succeed(
        new_backend, storage, descriptor, access, good, refused) -> None:
    source = new_backend()
    source.set_current_key("a")
    _, write, read = access(source, descriptor)
    write(good)
    before = read()
    with pytest.raises(SerializationError):
        write(refused)
    assert read() == before  # the refused write left nothing behind
    snapshot = source.snapshot(CheckpointId(1), storage)  # would raise if the value had been kept
    target = new_backend()
    target.restore([snapshot], storage)
    target.set_current_key("a")
    assert access(target, descriptor)[2]() == before
