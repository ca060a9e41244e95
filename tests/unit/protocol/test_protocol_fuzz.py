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
from tidemark.protocol.avro_compiled import UnsupportedSchema, compile_record
from tidemark.protocol.avro_reference import ReferenceReader
from tidemark.protocol.datum import to_datum
from tidemark.protocol.schema_ids import IDS_FILE, LocalSchemaIds, LocalSchemaIdTable
from tidemark.protocol.schemas import load_catalog, parse_version

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
    out.write(codec.wire_header(v1_id))
    avro.io.DatumWriter(v1.physical).write_data(v1.physical, to_datum(ack), avro.io.BinaryEncoder(out))
    expected = dataclasses.replace(ack, timings=dataclasses.replace(ack.timings, processed_bytes=0))
    assert LOCAL.decode_as(out.getvalue(), m.TaskAck) == expected


COMPILED_READERS = {
    schema_id: compile_record(type(LOCAL.decode(data)), load_catalog().newest(
        f"tidemark.protocol.{type(LOCAL.decode(data)).__name__}").physical)[1]
    for data in VALID for schema_id in [struct.unpack(">I", data[1:5])[0]]
}


@FAST
@given(mutated())
def test_the_compiled_reader_accepts_bytes_only_as_the_reference_reads_them(data: bytes) -> None:
    """Where the compiled reader returns a whole message, the reference decoder agrees with it."""
    schema_id = struct.unpack(">I", data[1:5])[0]
    try:
        message, end = COMPILED_READERS[schema_id](data, 5)
    except Exception:  # noqa: BLE001 - refused: the codec asks the reference decoder why
        return
    if end == len(data):
        version = load_catalog().newest(f"tidemark.protocol.{type(message).__name__}")
        datum, left = ReferenceReader(version.physical, version.physical).read(data, 5)
        assert left == 0 and to_datum(message) == datum


@dataclasses.dataclass(frozen=True)
class _Ratio:
    ratio: float


def test_a_schema_the_compiler_does_not_know_is_refused_clearly() -> None:
    schema = parse_version({"type": "record", "name": "X", "namespace": "t",
                            "fields": [{"name": "ratio", "type": "double"}]}, None).physical
    with pytest.raises(UnsupportedSchema, match="double"):
        compile_record(_Ratio, schema)
    with pytest.raises(UnsupportedSchema, match="differ"):
        compile_record(m.TaskTimings, schema)
