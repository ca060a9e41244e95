"""The codec's compiled hot path writes and reads exactly what the avro package does, byte for byte.

``golden/<case>.bin`` were written by the avro-package encoder the codec used before it compiled
its writers (see ``golden_cases.py``). Each is checked against the codec (compiled functions),
the reference encoder (:mod:`tidemark.protocol.avro_reference`), the avro package's stock
``DatumWriter`` and fastavro (the other faster encoder ``bench/bench_avro_encoding.py`` measures).
"""

from __future__ import annotations

import io
from typing import Any

import avro.io
import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from golden_cases import CASES, GOLDEN_DIR
from tidemark.protocol import codec, messages
from tidemark.protocol.avro_compiled import compile_record
from tidemark.protocol.avro_reference import ReferenceReader, ReferenceWriter
from tidemark.protocol.datum import to_datum
from tidemark.protocol.schema_ids import LocalSchemaIds
from tidemark.protocol.schemas import NAMESPACE, SchemaVersion, load_catalog, strip_logical_types

CATALOG = load_catalog()
IDS = LocalSchemaIds.from_dir()
LOCAL = codec.Codec.local()


def _golden(name: str) -> bytes:
    return (GOLDEN_DIR / f"{name}.bin").read_bytes()


def _full_name(message: Any) -> str:
    return f"{NAMESPACE}.{type(message).__name__}"


def _fastavro_schema(version: SchemaVersion) -> Any:
    return parse_schema(strip_logical_types(version.schema_json), named_schemas={})


def test_every_message_type_and_case_has_a_golden_file_and_nothing_else() -> None:
    assert {type(message) for message in CASES.values()} == set(messages.MESSAGE_TYPES)
    assert {p.stem for p in GOLDEN_DIR.glob("*.bin")} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_codec_writes_the_golden_bytes(name: str) -> None:
    assert LOCAL.encode(CASES[name]) == _golden(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fastavro_writes_the_golden_bytes(name: str) -> None:
    message = CASES[name]
    out = io.BytesIO(codec.wire_header(IDS.writer_id(_full_name(message))))
    out.seek(0, io.SEEK_END)
    schemaless_writer(out, _fastavro_schema(CATALOG.newest(_full_name(message))), to_datum(message))
    assert out.getvalue() == _golden(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_avro_package_writes_the_golden_bytes(name: str) -> None:
    message = CASES[name]
    newest = CATALOG.newest(_full_name(message))
    header = codec.wire_header(IDS.writer_id(_full_name(message)))
    reference = bytearray(header)
    ReferenceWriter(newest.physical).write(to_datum(message), reference)
    stock = io.BytesIO(header)
    stock.seek(0, io.SEEK_END)
    avro.io.DatumWriter(newest.physical).write(to_datum(message), avro.io.BinaryEncoder(stock))
    assert bytes(reference) == stock.getvalue() == _golden(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_decoder_reads_the_golden_bytes_back(name: str) -> None:
    message, data = CASES[name], _golden(name)
    newest = CATALOG.newest(_full_name(message))
    _, compiled_read = compile_record(type(message), newest.physical)
    assert compiled_read(data, codec.HEADER_SIZE) == (message, len(data))
    reference, left = ReferenceReader(newest.physical, newest.physical).read(data, codec.HEADER_SIZE)
    assert left == 0
    body = io.BytesIO(data[codec.HEADER_SIZE:])
    assert schemaless_reader(body, _fastavro_schema(newest), None) == reference == to_datum(message)
    assert body.tell() == len(data) - codec.HEADER_SIZE
    assert LOCAL.decode(data) == message
