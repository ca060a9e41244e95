"""Serializers: the default tagged codec, Avro, list framing, TTL wrapping; never pickle."""

from __future__ import annotations

import ast
import datetime as dt
import decimal
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tidemark.state
import tidemark.storage
from tidemark.state.serializers import (
    AvroSerializer,
    SerializationError,
    TaggedSerializer,
    frame_elements,
    serializer_from_config,
    unframe_elements,
)
from tidemark.state.ttl import TtlSerializer

CODEC = TaggedSerializer()
ZONES = st.builds(lambda minutes: dt.timezone(dt.timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60))
SPARK_ROW_VALUES = st.one_of(  # what a Spark step's row holds besides JSON's types
    st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1)),
    st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=ZONES),
    st.dates(), st.timedeltas(-dt.timedelta(days=10**6), dt.timedelta(days=10**6)), st.decimals(allow_nan=False, allow_infinity=False))
VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
              st.text(), st.binary(), SPARK_ROW_VALUES),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(), st.binary(max_size=4)),
                        inner, max_size=4)),
    max_leaves=12,
)


def same(a, b) -> bool:
    """Equality that also checks types (True != 1, (1,) != [1], b'' != '')."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset() and a.replace(tzinfo=None) == b.replace(tzinfo=None)
    if isinstance(a, decimal.Decimal):
        return str(a) == str(b)
    return a == b


@given(VALUES)
def test_tagged_round_trip_keeps_types(value) -> None:
    assert same(CODEC.deserialize(CODEC.serialize(value)), value)


def test_tagged_layout_is_stable() -> None:
    assert CODEC.serialize(1) == b"i" + (1).to_bytes(8, "big")
    assert CODEC.serialize("é") == b"s\x00\x00\x00\x02\xc3\xa9"
    assert CODEC.serialize((None, True)) == b"t\x00\x00\x00\x02NT"
    assert CODEC.deserialize(CODEC.serialize(2**100)) == 2**100
    assert CODEC.serialize(dt.date(1970, 1, 2)) == b"a\x00\x00\x00\x01"
    assert CODEC.serialize(dt.datetime(1970, 1, 1, 0, 0, 1)) == b"Z" + (10**6).to_bytes(8, "big")
    assert CODEC.serialize(dt.datetime(1970, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == (
        b"z" + bytes(8) + (3600).to_bytes(4, "big"))
    assert CODEC.serialize(decimal.Decimal("-1.50")) == b"x\x00\x00\x00\x05-1.50"


@pytest.mark.parametrize("bad", [{1, 2}, object(), bytearray(b"x"), [1, {2}]])
def test_tagged_refuses_unknown_types(bad) -> None:
    with pytest.raises(SerializationError):
        CODEC.serialize(bad)


@pytest.mark.parametrize("data", [b"", b"Z", b"s\x00\x00\x00\x05ab", b"NN", b"l\x00\x00\x00\x02N", b"z\x00",
                                  b"x\x00\x00\x00\x03abc", b"x\x00\x00\x00\x09"])
def test_tagged_refuses_malformed_bytes(data: bytes) -> None:
    with pytest.raises(SerializationError):
        CODEC.deserialize(data)


def test_avro_round_trip_and_rebuild_from_config() -> None:
    schema = {"type": "record", "name": "Event", "fields": [
        {"name": "id", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "payload", "type": ["null", "bytes"]}]}
    ser = AvroSerializer(schema)
    value = {"id": 7, "tags": ["a", "b"], "payload": b"\x00\xff"}
    data = ser.serialize(value)
    rebuilt = serializer_from_config(ser.serializer_id, ser.config())
    assert rebuilt.deserialize(data) == value
    with pytest.raises(SerializationError):
        ser.serialize({"id": "not a long"})


def test_list_framing_and_ttl_wrapper() -> None:
    elements = [b"", b"a", b"\x00" * 300]
    assert unframe_elements(frame_elements(elements)) == elements
    with pytest.raises(SerializationError):
        unframe_elements(frame_elements(elements)[:-1])
    ttl = TtlSerializer(CODEC)
    assert ttl.deserialize(ttl.serialize(("v", 123))) == ("v", 123)


def test_no_pickle_in_state_or_storage() -> None:
    roots = [Path(tidemark.state.__file__).parent, Path(tidemark.storage.__file__).parent]
    for root in roots:
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                assert not any(n.split(".")[0] in ("pickle", "cPickle", "dill", "marshal")
                               for n in names), path
