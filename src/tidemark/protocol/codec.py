"""The codec: protocol messages <-> Confluent wire format (magic ``0`` + 4-byte id + Avro body).

Encoding writes the newest schema version of the message's record with that version's id.
Decoding reads the writer schema named by the id, resolves it into the newest reader schema of
the same record (Avro schema resolution: added fields take their defaults) and builds the frozen
dataclass. Every failure on input bytes is a :class:`~tidemark.protocol.errors.DecodeError`
subclass; nothing else escapes :meth:`Codec.decode` (with the local id table).

The framing is written here (:func:`wire_header`, :func:`schema_id_of`): importing
confluent-kafka's helpers for five bytes would import its Schema Registry client with them
(its HTTP and OAuth stacks), a good part of every service's start; a unit test checks the bytes
against confluent-kafka's ``SchemaId``. Avro bodies of the
newest schema versions are written and read by functions compiled for each message
(:mod:`tidemark.protocol.avro_compiled`) from the schemas the ``avro`` package parsed and
checked; they write the same bytes as the avro package (golden tests prove it). Older or foreign
writer versions (schema resolution), and any body the compiled reader refuses, go through the
reference decoder of :mod:`tidemark.protocol.avro_reference`, which says precisely why a body
is bad (truncated or malformed). See ``docs/concepts/wire-format.md``.

A :class:`Codec` is immutable after construction apart from its plan caches (filled once per
message type and schema id) and may be shared between threads. Module-level :func:`encode`,
:func:`decode` and :func:`decode_as` use :func:`default_codec`.
"""

from __future__ import annotations

import os
import struct
import threading
from dataclasses import dataclass
from typing import TypeVar

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from tidemark.protocol import messages
from tidemark.protocol.avro_compiled import Reader, UnsupportedSchema, Writer, compile_record
from tidemark.protocol.avro_reference import ReferenceReader, ReferenceWriter, Truncated
from tidemark.protocol.datum import RecordPlan, record_plan
from tidemark.protocol.errors import (
    BadMagicByte,
    DecodeError,
    EncodeError,
    MalformedRecord,
    SchemaCatalogError,
    TruncatedRecord,
    UnexpectedMessageType,
    UnknownSchemaId,
)
from tidemark.protocol.schema_ids import (
    LocalSchemaIds,
    RegistrySchemaIds,
    SchemaIdResolver,
    registry_client,
    without_credentials,
)
from tidemark.protocol.schemas import NAMESPACE, SchemaCatalog, SchemaVersion, load_catalog

MAGIC_BYTE = 0
HEADER_SIZE = 5  # magic byte + 4-byte big-endian schema id
_HEADER = struct.Struct(">bI")
REGISTRY_URL_ENV = "TIDEMARK_SCHEMA_REGISTRY_URL"

M = TypeVar("M")


def wire_header(schema_id: int) -> bytes:
    """The 5-byte Confluent wire-format header naming ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def schema_id_of(data: bytes) -> int:
    """The schema id in the header of ``data`` (at least :data:`HEADER_SIZE` bytes)."""
    return int.from_bytes(data[1:HEADER_SIZE], "big")


def _reference_writer(cls: type, version: SchemaVersion) -> Writer:
    """The avro package's writer, for a schema the compiler does not support."""
    plan, writer = record_plan(cls), ReferenceWriter(version.physical)
    return lambda message, out: writer.write(plan.to_avro(message), out)


@dataclass(frozen=True, slots=True)
class _EncodePlan:
    header: bytes
    write: Writer


@dataclass(frozen=True, slots=True)
class _DecodePlan:
    read: Reader | None  # compiled; None unless the writer schema is the newest (the reader's)
    record: RecordPlan
    reference: ReferenceReader


class Codec:
    """Encodes and decodes every message of :data:`tidemark.protocol.messages.MESSAGE_TYPES`."""

    def __init__(self, resolver: SchemaIdResolver, catalog: SchemaCatalog) -> None:
        self._resolver = resolver
        self._catalog = catalog
        self._by_name = {f"{NAMESPACE}.{cls.__name__}": cls for cls in messages.MESSAGE_TYPES}
        missing = sorted(set(self._by_name) - set(catalog.names()))
        if missing:
            raise SchemaCatalogError(f"no schema for {missing}")
        self._encode_plans: dict[type, _EncodePlan] = {}
        self._decode_plans: dict[int, _DecodePlan] = {}
        self._lock = threading.Lock()

    @classmethod
    def local(cls) -> Codec:
        """A codec over the committed local id table."""
        return cls(LocalSchemaIds.from_dir(), load_catalog())

    @classmethod
    def with_registry(cls, url: str, timeout_s: float = 5.0) -> Codec:
        """A codec that registers the schemas at ``url`` and uses the registry's ids."""
        catalog = load_catalog()
        resolver = RegistrySchemaIds(registry_client(url, timeout_s), catalog, without_credentials(url))
        return cls(resolver, catalog)

    def encode(self, message: object) -> bytes:
        """The Confluent wire-format encoding of ``message``; raises :class:`EncodeError`."""
        plan = self._encode_plans.get(type(message)) or self._encode_plan(type(message))
        out = bytearray(plan.header)
        try:
            plan.write(message, out)
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            raise EncodeError(f"cannot encode {type(message).__name__}: {exc}") from exc
        return bytes(out)

    def decode(self, data: bytes) -> object:
        """The message encoded in ``data``; raises only :class:`DecodeError` subclasses."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise MalformedRecord(f"expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < 1:
            raise TruncatedRecord("empty record")
        if data[0] != MAGIC_BYTE:
            if len(data) >= HEADER_SIZE and self._resolver.is_known(schema_id_of(data)):
                raise BadMagicByte(data[0])
            raise MalformedRecord(f"not in the Confluent wire format (first byte {data[0]})")
        if len(data) < HEADER_SIZE:
            raise TruncatedRecord(f"{len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
        start, schema_id = HEADER_SIZE, schema_id_of(data)
        plan = self._decode_plans.get(schema_id) or self._decode_plan(schema_id)
        if plan.read is not None:
            try:
                message, end = plan.read(data, start)
                if end == len(data):
                    return message
            except Exception:  # noqa: BLE001, S110 - the reference decoder below says why
                pass
        return self._reference_decode(plan, data, start, schema_id)

    @staticmethod
    def _reference_decode(plan: _DecodePlan, data: bytes, start: int, schema_id: int) -> object:
        """The message as the reference decoder reads it, or the precise :class:`DecodeError`."""
        try:
            datum, left = plan.reference.read(data, start)
        except Truncated as exc:
            raise TruncatedRecord(f"schema id {schema_id}: body ends early: {exc}") from None
        except Exception as exc:  # any failure of the Avro reader on hostile bytes
            raise MalformedRecord(f"schema id {schema_id}: {type(exc).__name__}: {exc}") from None
        if left:
            raise MalformedRecord(f"schema id {schema_id}: {left} trailing bytes after the record")
        try:
            return plan.record.from_avro(datum)
        except Exception as exc:  # e.g. a symbol the enum of this build does not know
            raise MalformedRecord(f"schema id {schema_id}: {type(exc).__name__}: {exc}") from None

    def decode_as(self, data: bytes, expected_type: type[M]) -> M:
        """:meth:`decode`, then :class:`UnexpectedMessageType` unless it is an ``expected_type``."""
        message = self.decode(data)
        if not isinstance(message, expected_type):
            raise UnexpectedMessageType(expected_type, type(message))
        return message

    def _encode_plan(self, cls: type) -> _EncodePlan:
        full_name = f"{NAMESPACE}.{cls.__name__}"
        if self._by_name.get(full_name) is not cls:
            raise EncodeError(f"not a protocol message: {cls.__name__}")
        newest = self._catalog.newest(full_name)
        header = wire_header(self._resolver.writer_id(full_name))
        try:
            write, _ = compile_record(cls, newest.physical)
        except UnsupportedSchema:
            write = _reference_writer(cls, newest)
        plan = _EncodePlan(header, write)
        with self._lock:
            self._encode_plans[cls] = plan
        return plan

    def _decode_plan(self, schema_id: int) -> _DecodePlan:
        writer = self._resolver.writer_schema(schema_id)
        if writer is None or writer.full_name not in self._by_name:
            raise UnknownSchemaId(schema_id)
        reader = self._catalog.newest(writer.full_name)
        if not _readable(writer, reader):
            raise UnknownSchemaId(schema_id, f"{writer.full_name} not readable by the newest schema")
        cls = self._by_name[writer.full_name]
        read = None
        if writer.fingerprint == reader.fingerprint:  # no schema resolution needed
            try:
                _, read = compile_record(cls, reader.physical)
            except UnsupportedSchema:
                pass
        plan = _DecodePlan(read, record_plan(cls), ReferenceReader(writer.physical, reader.physical))
        with self._lock:
            self._decode_plans[schema_id] = plan
        return plan


def _readable(writer: SchemaVersion, reader: SchemaVersion) -> bool:
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader.physical, writer.physical)
    return result.compatibility is SchemaCompatibilityType.compatible


_default: Codec | None = None
_default_lock = threading.Lock()


def default_codec() -> Codec:
    """The process-wide codec: Schema Registry at ``$TIDEMARK_SCHEMA_REGISTRY_URL`` if set, else local ids."""
    global _default
    with _default_lock:
        if _default is None:
            url = os.environ.get(REGISTRY_URL_ENV)
            _default = Codec.with_registry(url) if url else Codec.local()
        return _default


def encode(message: object) -> bytes:
    """Encode with :func:`default_codec`."""
    return default_codec().encode(message)


def decode(data: bytes) -> object:
    """Decode with :func:`default_codec`; raises only :class:`DecodeError` subclasses."""
    return default_codec().decode(data)


def decode_as(data: bytes, expected_type: type[M]) -> M:
    """Decode with :func:`default_codec`, insisting on ``expected_type``."""
    return default_codec().decode_as(data, expected_type)


__all__ = ["Codec", "DecodeError", "decode", "decode_as", "default_codec", "encode", "wire_header"]
