"""The codec: round trips, the wire header, and the decode errors that tell bad input apart."""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest

from protocol_samples import SAMPLES
from tidemark.protocol import codec
from tidemark.protocol import messages as m
from tidemark.protocol.errors import (
    BadMagicByte,
    DecodeError,
    EncodeError,
    MalformedRecord,
    TruncatedRecord,
    UnexpectedMessageType,
    UnknownSchemaId,
)
from tidemark.protocol.schema_ids import LocalSchemaIds
from tidemark.protocol.schemas import NAMESPACE

ALL_SAMPLES = [s for samples in SAMPLES.values() for s in samples]
LOCAL_IDS = LocalSchemaIds.from_dir()


@pytest.fixture(scope="module")
def local() -> codec.Codec:
    return codec.Codec.local()


@pytest.mark.parametrize("message", ALL_SAMPLES, ids=lambda s: type(s).__name__)
def test_round_trip_keeps_every_field_and_type(local: codec.Codec, message: Any) -> None:
    decoded = local.decode(local.encode(message))
    assert decoded == message
    assert type(decoded) is type(message)
    for field in dataclasses.fields(message):  # enums stay enums, tuples stay tuples
        assert type(getattr(decoded, field.name)) is type(getattr(message, field.name)), field.name


@pytest.mark.parametrize("message", ALL_SAMPLES, ids=lambda s: type(s).__name__)
def test_header_is_magic_byte_and_the_newest_schema_id(local: codec.Codec, message: Any) -> None:
    data = local.encode(message)
    magic, schema_id = struct.unpack(">bI", data[:5])
    assert magic == 0
    assert schema_id == LOCAL_IDS.writer_id(f"{NAMESPACE}.{type(message).__name__}")


@pytest.mark.parametrize("schema_id", [0, 1, 258, 2**31 - 1, 2**32 - 1])
def test_the_framing_is_confluent_kafkas_byte_for_byte(schema_id: int) -> None:
    from confluent_kafka.schema_registry import prefix_schema_id_deserializer
    from confluent_kafka.schema_registry.serde import SchemaId

    assert codec.wire_header(schema_id) == SchemaId("AVRO", schema_id).id_to_bytes()
    framed = codec.wire_header(schema_id) + b"body"
    read = SchemaId("AVRO")
    assert prefix_schema_id_deserializer(framed, None, read).tell() == codec.HEADER_SIZE
    assert codec.schema_id_of(framed) == read.id == schema_id


def test_module_functions_use_the_local_table_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(codec.REGISTRY_URL_ENV, raising=False)
    monkeypatch.setattr(codec, "_default", None)
    change = SAMPLES[m.StateChange][0]
    assert codec.decode(codec.encode(change)) == change
    assert codec.decode_as(codec.encode(change), m.StateChange) == change
    assert codec.default_codec() is codec.default_codec()


def test_decode_as_refuses_another_message_type(local: codec.Codec) -> None:
    data = local.encode(SAMPLES[m.Barrier][0])
    assert local.decode_as(data, m.Barrier) == SAMPLES[m.Barrier][0]
    with pytest.raises(UnexpectedMessageType) as caught:
        local.decode_as(data, m.TaskAck)
    assert caught.value.reason == "unexpected-type"
    assert caught.value.expected is m.TaskAck and caught.value.actual is m.Barrier


def test_encode_refuses_non_messages_and_out_of_range_values(local: codec.Codec) -> None:
    with pytest.raises(EncodeError, match="not a protocol message"):
        local.encode(m.StateFile("a", 1, "x"))
    with pytest.raises(EncodeError):
        local.encode(object())
    change = SAMPLES[m.StateChange][0]
    with pytest.raises(EncodeError, match="int"):
        local.encode(dataclasses.replace(change, key_group=2**31))
    with pytest.raises(EncodeError, match="long"):
        local.encode(dataclasses.replace(change, epoch=2**63))
    with pytest.raises(EncodeError):
        local.encode(dataclasses.replace(change, key="not bytes"))


# --------------------------------------------------------------------------- the four bad inputs


@pytest.fixture(scope="module")
def valid(local: codec.Codec) -> bytes:
    return local.encode(SAMPLES[m.TaskAck][0])


def test_wrong_magic_byte(local: codec.Codec, valid: bytes) -> None:
    with pytest.raises(BadMagicByte) as caught:
        local.decode(b"\x01" + valid[1:])
    assert caught.value.reason == "bad-magic-byte" and caught.value.magic == 1


@pytest.mark.parametrize("garbage", [b'{"not": "avro"}', b"\xde\xad\xbe\xef\x00\x01", b"\x07", b"garbage"])
def test_garbage_bytes_are_malformed_not_a_bad_magic_byte(local: codec.Codec, garbage: bytes) -> None:
    with pytest.raises(MalformedRecord, match="not in the Confluent wire format") as caught:
        local.decode(garbage)
    assert caught.value.reason == "malformed"


def test_garbage_behind_a_valid_header_is_malformed(local: codec.Codec) -> None:
    with pytest.raises(MalformedRecord) as caught:
        local.decode(b"\x00" + struct.pack(">I", LOCAL_IDS.writer_id("tidemark.protocol.Barrier")) + b"\xff" * 40)
    assert caught.value.reason == "malformed"


def test_unknown_schema_id(local: codec.Codec, valid: bytes) -> None:
    with pytest.raises(UnknownSchemaId) as caught:
        local.decode(b"\x00" + struct.pack(">I", 99_999) + valid[5:])
    assert caught.value.reason == "unknown-schema-id" and caught.value.schema_id == 99_999


@pytest.mark.parametrize("cut", [0, 1, 3, 4])
def test_too_short_for_the_header_is_truncated(local: codec.Codec, valid: bytes, cut: int) -> None:
    with pytest.raises(TruncatedRecord) as caught:
        local.decode(valid[:cut])
    assert caught.value.reason == "truncated"


def test_every_cut_of_the_body_is_truncated(local: codec.Codec, valid: bytes) -> None:
    for cut in range(5, len(valid)):
        with pytest.raises(TruncatedRecord):
            local.decode(valid[:cut])


def test_trailing_bytes_are_malformed(local: codec.Codec, valid: bytes) -> None:
    with pytest.raises(MalformedRecord, match="trailing"):
        local.decode(valid + b"\x00")


def test_invalid_enum_symbol_is_malformed(local: codec.Codec) -> None:
    trigger = SAMPLES[m.CheckpointTrigger][0]
    data = bytearray(local.encode(trigger))
    enum_at = 5 + 1 + len(trigger.job_id) + 1  # header, job_id (len + utf8), checkpoint_id 42 (1 byte)
    assert data[enum_at] == 0  # CHECKPOINT
    data[enum_at] = 2 * 7  # zig-zag 7: beyond the three symbols
    with pytest.raises(MalformedRecord):
        local.decode(bytes(data))


def test_hostile_length_prefix_is_refused_without_allocating(local: codec.Codec) -> None:
    header = b"\x00" + struct.pack(">I", LOCAL_IDS.writer_id("tidemark.protocol.StateChange"))
    huge = b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f"  # zig-zag varint of 2**62 - 1 bytes of job_id
    with pytest.raises(TruncatedRecord):
        local.decode(header + huge + b"abc")
    negative = b"\x05"  # zig-zag -3
    with pytest.raises(MalformedRecord):
        local.decode(header + negative + b"abc")


def test_a_hostile_array_count_is_refused(local: codec.Codec) -> None:
    ack = local.encode(SAMPLES[m.CheckpointDiscarded][1])  # released_files: empty array at the end
    assert ack[-1] == 0
    with pytest.raises(DecodeError):
        local.decode(ack[:-1] + b"\xfe\xff\xff\xff\xff\xff\xff\xff\x7f")


def test_non_bytes_input_is_a_decode_error(local: codec.Codec) -> None:
    with pytest.raises(MalformedRecord):
        local.decode("text")  # type: ignore[arg-type]


def test_every_decode_error_has_a_distinct_reason() -> None:
    reasons = [cls.reason for cls in (BadMagicByte, UnknownSchemaId, TruncatedRecord, MalformedRecord,
                                      UnexpectedMessageType)]
    assert len(set(reasons)) == len(reasons) and DecodeError.reason not in reasons


def test_the_four_dead_letter_cases_raise_four_different_errors(local: codec.Codec, valid: bytes) -> None:
    cases = {
        b"\x89PNG\r\n\x1a\n garbage": MalformedRecord,
        b"\x01" + valid[1:]: BadMagicByte,
        b"\x00" + struct.pack(">I", 4_000_000) + valid[5:]: UnknownSchemaId,
        valid[: len(valid) // 2]: TruncatedRecord,
    }
    reasons = set()
    for data, expected in cases.items():
        with pytest.raises(DecodeError) as caught:
            local.decode(data)
        assert type(caught.value) is expected
        reasons.add(caught.value.reason)
    assert len(reasons) == 4
    assert local.decode(valid) == SAMPLES[m.TaskAck][0]  # the codec is unaffected
