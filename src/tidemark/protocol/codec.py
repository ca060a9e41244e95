"""The codec: protocol messages <-> Confluent wire format (magic ``0`` + 4-byte id + Avro body).

Encoding writes the newest schema version of the message's record with that version's id.
Decoding reads the writer schema named by the id, resolves it into the newest reader schema of
the same record (Avro schema resolution: added fields take their defaults) and builds the frozen
dataclass. Every failure on input bytes is a :class:`~tidemark.protocol.errors.DecodeError`
subclass; nothing else escapes :meth:`Codec.decode` (with the local id table).

A :class:`Codec` is immutable after construction apart from its plan caches (filled once per
message type and schema id) and may be shared between threads. Module-level :func:`encode`, :func:`decode` and :func:`decode_as` use
:func:`default_codec`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import struct
import threading
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import avro.errors
import avro.io
import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from tidemark.protocol import messages
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
from tidemark.protocol.registry import LocalSchemaIds, RegistrySchemaIds, SchemaIdResolver, SchemaRegistryClient
from tidemark.protocol.schemas import NAMESPACE, SchemaCatalog, SchemaVersion, load_catalog

MAGIC_BYTE = 0
HEADER = struct.Struct(">bI")
REGISTRY_URL_ENV = "TIDEMARK_SCHEMA_REGISTRY_URL"

M = TypeVar("M")
Convert = Callable[[Any], Any]

# --------------------------------------------------------------------------- dataclass <-> Avro datum


def _converters(hint: Any) -> tuple[Convert | None, Convert | None]:
    """(to_avro, from_avro) for a type hint of a message field; ``None`` means identity."""
    while hasattr(hint, "__supertype__"):  # typing.NewType
        hint = hint.__supertype__
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return (lambda v: v.value), hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        plan = _record_plan(hint)
        return plan.to_avro, plan.from_avro
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        to_inner, from_inner = _converters(inner)
        to = None if to_inner is None else (lambda v, f=to_inner: None if v is None else f(v))
        back = None if from_inner is None else (lambda v, f=from_inner: None if v is None else f(v))
        return to, back
    if origin is tuple:
        to_item, from_item = _converters(typing.get_args(hint)[0])
        if to_item is None:
            return list, tuple
        return (lambda v, f=to_item: [f(x) for x in v]), (lambda v, f=from_item: tuple(f(x) for x in v))
    if origin is dict:
        return dict, dict
    return None, None


@dataclass(frozen=True, slots=True)
class _RecordPlan:
    """Field-by-field conversion between one dataclass and its Avro record datum."""

    cls: type
    fields: tuple[tuple[str, Convert | None, Convert | None], ...]

    def to_avro(self, obj: Any) -> dict[str, Any]:
        if type(obj) is not self.cls:
            raise EncodeError(f"expected {self.cls.__name__}, got {type(obj).__name__}")
        out = {}
        for name, to, _ in self.fields:
            value = getattr(obj, name)
            out[name] = value if to is None else to(value)
        return out

    def from_avro(self, datum: dict[str, Any]) -> Any:
        kwargs = {}
        for name, _, back in self.fields:
            value = datum[name]
            kwargs[name] = value if back is None else back(value)
        return self.cls(**kwargs)


_PLANS: dict[type, _RecordPlan] = {}


def _record_plan(cls: type) -> _RecordPlan:
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = tuple((f.name, *_converters(hints[f.name])) for f in dataclasses.fields(cls))
        plan = _PLANS[cls] = _RecordPlan(cls, fields)
    return plan


def to_datum(message: object) -> dict[str, Any]:
    """The Avro datum (plain dicts, lists, str symbols) of a protocol dataclass."""
    return _record_plan(type(message)).to_avro(message)


def from_datum(cls: type[M], datum: dict[str, Any]) -> M:
    """The protocol dataclass ``cls`` built from an Avro datum read with its newest schema."""
    result: M = _record_plan(cls).from_avro(datum)
    return result


# --------------------------------------------------------------------------- bounded Avro I/O


class _Truncated(Exception):
    """Internal: the body ended before a value it declares."""


class _BoundedDecoder(avro.io.BinaryDecoder):
    """A decoder over an in-memory body that tells truncation from other malformations.

    Every read and skip is bounded by the bytes actually present, so a hostile length prefix
    costs nothing. It keeps its own position (no ``BytesIO``): the leaf reads are the hot path.
    """

    def __init__(self, buf: bytes, start: int = 0) -> None:
        self._buf = buf
        self._pos = start

    def read(self, n: int) -> bytes:
        if n < 0:
            raise avro.errors.InvalidAvroBinaryEncoding(f"negative length {n}")
        start, end = self._pos, self._pos + n
        if end > len(self._buf):
            raise _Truncated(f"needed {n} bytes, {len(self._buf) - start} left")
        self._pos = end
        return self._buf[start:end]

    def read_long(self) -> int:
        buf, pos = self._buf, self._pos
        try:
            b = buf[pos]
            n, shift = b & 0x7F, 7
            while b & 0x80:
                if shift >= 70:
                    raise avro.errors.InvalidAvroBinaryEncoding("varint is too long")
                pos += 1
                b = buf[pos]
                n |= (b & 0x7F) << shift
                shift += 7
        except IndexError:
            raise _Truncated("body ends inside a varint") from None
        self._pos = pos + 1
        return (n >> 1) ^ -(n & 1)

    def read_utf8(self) -> str:
        return self.read(self.read_long()).decode("utf-8")

    def read_bytes(self) -> bytes:
        return self.read(self.read_long())

    def skip(self, n: int) -> None:
        self.read(n)

    def bytes_remaining(self) -> int:
        return len(self._buf) - self._pos


_PRIMITIVE_LEAVES = frozenset({"string", "long", "int", "bytes", "boolean"})


class _ResolvedReader(avro.io.DatumReader):
    """A DatumReader for a writer/reader pair already checked compatible when the plan was built.

    Leaves whose writer and reader types are the same skip the per-value ``match`` and dispatch
    of :meth:`avro.io.DatumReader.read_data`; everything else (promotions, unions, records,
    collections with their size guards) goes through the Avro implementation.
    """

    def read_data(self, writers_schema: avro.schema.Schema, readers_schema: avro.schema.Schema,
                  decoder: avro.io.BinaryDecoder) -> object:
        kind = writers_schema.type
        if kind == readers_schema.type:
            if kind == "string":
                return decoder.read_utf8()
            if kind == "long" or kind == "int":
                return decoder.read_long()
            if kind == "bytes":
                return decoder.read_bytes()
            if kind == "record":
                return self.read_record(writers_schema, readers_schema, decoder)  # type: ignore[arg-type]
            if kind == "enum":
                return self.read_enum(writers_schema, readers_schema, decoder)  # type: ignore[arg-type]
            if kind == "array":
                return self.read_array(writers_schema, readers_schema, decoder)  # type: ignore[arg-type]
            if kind == "union":
                return self._read_union(writers_schema, readers_schema, decoder)  # type: ignore[arg-type]
        return super().read_data(writers_schema, readers_schema, decoder)

    def _read_union(self, writers_schema: avro.schema.UnionSchema, readers_schema: avro.schema.UnionSchema,
                    decoder: avro.io.BinaryDecoder) -> object:
        """A union read into the reader branch of the same type, else by Avro's resolution."""
        index = decoder.read_long()
        if not 0 <= index < len(writers_schema.schemas):
            raise avro.errors.InvalidAvroBinaryEncoding(f"union branch {index} out of range")
        branch = writers_schema.schemas[index]
        if branch.type == "null":
            return None
        for candidate in readers_schema.schemas:
            if candidate.type == branch.type and candidate.type in _PRIMITIVE_LEAVES:
                return self.read_data(branch, candidate, decoder)
        return super().read_data(branch, readers_schema, decoder)


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class _BufferEncoder(avro.io.BinaryEncoder):
    """An encoder appending to a ``bytearray``; refuses ints outside the range of the Avro type."""

    def __init__(self, buf: bytearray) -> None:
        self._buf = buf

    def write(self, datum: bytes) -> None:
        self._buf += datum

    def write_int(self, datum: int) -> None:
        if not _INT32_MIN <= datum <= _INT32_MAX:
            raise ValueError(f"{datum} does not fit an Avro int")
        self.write_long(datum)

    def write_long(self, datum: int) -> None:
        if not _INT64_MIN <= datum <= _INT64_MAX:
            raise ValueError(f"{datum} does not fit an Avro long")
        datum = (datum << 1) ^ (datum >> 63)
        buf = self._buf
        while datum > 0x7F:
            buf.append((datum & 0x7F) | 0x80)
            datum >>= 7
        buf.append(datum)

    def write_bytes(self, datum: bytes) -> None:
        self.write_long(len(datum))
        self._buf += datum


class _UncheckedWriter(avro.io.DatumWriter):
    """A DatumWriter without the whole-datum ``validate`` pass.

    The datum always comes from a typed dataclass through :class:`_RecordPlan`; every leaf is
    still type-checked here or in ``write_data``, and :class:`_BufferEncoder` bounds ints.
    """

    def write(self, datum: object, encoder: avro.io.BinaryEncoder) -> None:
        self.write_data(self.writers_schema, datum, encoder)

    def write_data(self, writers_schema: avro.schema.Schema, datum: object, encoder: avro.io.BinaryEncoder) -> None:
        kind = writers_schema.type
        if kind == "string" and type(datum) is str:
            return encoder.write_utf8(datum)
        if kind == "long" and type(datum) is int:
            return encoder.write_long(datum)
        if kind == "int" and type(datum) is int:
            return encoder.write_int(datum)
        if kind == "bytes" and type(datum) is bytes:
            return encoder.write_bytes(datum)
        return super().write_data(writers_schema, datum, encoder)

    def write_union(self, writers_schema: avro.schema.UnionSchema, datum: object,
                    encoder: avro.io.BinaryEncoder) -> None:
        """``["null", T]`` picks its branch by ``None``-ness; other unions validate each branch."""
        branches = writers_schema.schemas
        if len(branches) == 2 and branches[0].type == "null":
            if datum is None:
                return encoder.write_long(0)
            encoder.write_long(1)
            return self.write_data(branches[1], datum, encoder)
        return super().write_union(writers_schema, datum, encoder)


# --------------------------------------------------------------------------- codec


@dataclass(frozen=True, slots=True)
class _EncodePlan:
    header: bytes
    record: _RecordPlan
    writer: _UncheckedWriter


@dataclass(frozen=True, slots=True)
class _DecodePlan:
    record: _RecordPlan
    reader: _ResolvedReader


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
        return cls(RegistrySchemaIds(SchemaRegistryClient(url, timeout_s), catalog), catalog)

    def encode(self, message: object) -> bytes:
        """The Confluent wire-format encoding of ``message``; raises :class:`EncodeError`."""
        plan = self._encode_plans.get(type(message)) or self._encode_plan(type(message))
        datum = plan.record.to_avro(message)
        out = bytearray(plan.header)
        try:
            plan.writer.write(datum, _BufferEncoder(out))
        except (avro.errors.AvroException, TypeError, ValueError, AttributeError, struct.error) as exc:
            raise EncodeError(f"cannot encode {type(message).__name__}: {exc}") from exc
        return bytes(out)

    def decode(self, data: bytes) -> object:
        """The message encoded in ``data``; raises only :class:`DecodeError` subclasses."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise MalformedRecord(f"expected bytes, got {type(data).__name__}")
        if len(data) < 1:
            raise TruncatedRecord("empty record")
        if data[0] != MAGIC_BYTE:
            if len(data) >= HEADER.size and self._resolver.is_known(HEADER.unpack_from(data)[1]):
                raise BadMagicByte(data[0])
            raise MalformedRecord(f"not in the Confluent wire format (first byte {data[0]})")
        if len(data) < HEADER.size:
            raise TruncatedRecord(f"{len(data)} bytes, shorter than the {HEADER.size}-byte header")
        _, schema_id = HEADER.unpack_from(data)
        plan = self._decode_plans.get(schema_id) or self._decode_plan(schema_id)
        decoder = _BoundedDecoder(bytes(data), HEADER.size)
        try:
            datum = plan.reader.read(decoder)
        except _Truncated as exc:
            raise TruncatedRecord(f"schema id {schema_id}: body ends early: {exc}") from None
        except Exception as exc:  # any failure of the Avro reader on hostile bytes
            raise MalformedRecord(f"schema id {schema_id}: {type(exc).__name__}: {exc}") from None
        left = decoder.bytes_remaining()
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
        header = HEADER.pack(MAGIC_BYTE, self._resolver.writer_id(full_name))
        plan = _EncodePlan(header, _record_plan(cls), _UncheckedWriter(newest.physical))
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
        plan = _DecodePlan(_record_plan(self._by_name[writer.full_name]),
                           _ResolvedReader(writer.physical, reader.physical))
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


__all__ = ["Codec", "DecodeError", "decode", "decode_as", "default_codec", "encode", "from_datum", "to_datum"]
