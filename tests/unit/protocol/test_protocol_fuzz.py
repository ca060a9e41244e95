"""Property tests: arbitrary messages round-trip; arbitrary or mutated bytes only raise DecodeError."""

from __future__ import annotations

import dataclasses
import io
import struct
import time
from typing import Any

import avro.io
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol_samples import SAMPLES, any_message, message_strategy
from tidemark.protocol import codec
from tidemark.protocol import messages as m
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.registry import IDS_FILE, LocalSchemaIds, LocalSchemaIdTable
from tidemark.protocol.schemas import load_catalog

LOCAL = codec.Codec.local()
VALID = [LOCAL.encode(s) for samples in SAMPLES.values() for s in samples]
KNOWN_IDS = sorted(e.id for e in LocalSchemaIdTable.load(load_catalog().root / IDS_FILE).entries)  # type: ignore[operator]
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_decode_error(data: bytes) -> Any:
    started = time.perf_counter()
    try:
        return LOCAL.decode(data)
    except DecodeError as exc:
        assert exc.reason in {"bad-magic-byte", "unknown-schema-id", "truncated", "malformed"}
        return exc
    finally:
        assert time.perf_counter() - started < 1.0


@FAST
@given(any_message)
def test_any_message_round_trips(message: Any) -> None:
    assert LOCAL.decode(LOCAL.encode(message)) == message


@FAST
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_decode_errors(data: bytes) -> None:
    _decode_or_decode_error(data)


@FAST
@given(st.sampled_from(KNOWN_IDS), st.binary(max_size=200))
def test_random_bodies_behind_a_known_id_only_raise_decode_errors(schema_id: int, body: bytes) -> None:
    _decode_or_decode_error(b"\x00" + struct.pack(">I", schema_id) + body)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(VALID)))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "set", "insert", "delete", "cut"]))
        at = draw(st.integers(5, max(5, len(data) - 1)))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=10))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 10))]
        else:
            del data[at:]
    return bytes(data)


@FAST
@given(mutated())
def test_mutated_valid_encodings_only_raise_decode_errors(data: bytes) -> None:
    _decode_or_decode_error(data)


@pytest.mark.parametrize("varint", [b"\xff" * 12, b"\xfe\xff\xff\xff\xff\xff\xff\xff\xff\x01"])
def test_overlong_varints_are_malformed(varint: bytes) -> None:
    schema_id = LocalSchemaIds.from_dir().writer_id("tidemark.protocol.StateChange")
    result = _decode_or_decode_error(b"\x00" + struct.pack(">I", schema_id) + varint)
    assert isinstance(result, DecodeError)


@FAST
@given(message_strategy(m.TaskAck))
def test_any_task_ack_written_with_v1_is_read_by_the_newest_reader(ack: m.TaskAck) -> None:
    """BACKWARD on arbitrary data: v1 bytes decode to the ack with processed_bytes defaulted."""
    catalog = load_catalog()
    v1 = catalog.versions("tidemark.protocol.TaskAck")[0]
    table = LocalSchemaIdTable.load(catalog.root / IDS_FILE)  # type: ignore[operator]
    v1_id = next(e.id for e in table.entries if (e.subject, e.version) == (v1.subject, 1))
    out = io.BytesIO()
    out.write(codec.HEADER.pack(codec.MAGIC_BYTE, v1_id))
    avro.io.DatumWriter(v1.physical).write_data(v1.physical, codec.to_datum(ack), avro.io.BinaryEncoder(out))
    expected = dataclasses.replace(ack, timings=dataclasses.replace(ack.timings, processed_bytes=0))
    assert LOCAL.decode_as(out.getvalue(), m.TaskAck) == expected
