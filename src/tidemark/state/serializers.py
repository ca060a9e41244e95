"""Per-descriptor value serializers. Never pickle.

``TaggedSerializer`` is the safe default: a self-describing binary codec for ``None``, ``bool``,
``int`` (any size), ``float``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict`` and the values
a Spark row holds besides (``datetime``, ``date``, ``Decimal``, ``timedelta``: a Spark step's rows
cross the exchange in it). Layout (all integers big-endian): a one-byte tag, then

* ``N`` none, ``F``/``T`` bools, ``i`` + 8-byte signed int, ``I`` + u32 length + signed
  two's-complement bytes (ints outside 64 bits), ``d`` + 8-byte IEEE double,
* ``s`` + u32 length + UTF-8, ``b`` + u32 length + bytes,
* ``l`` / ``t`` + u32 count + items, ``m`` + u32 count + (key, value) items,
* ``Z`` + 8-byte microseconds since the epoch (a naive ``datetime``, read as UTC) and ``z`` the
  same + 4-byte signed UTC offset in seconds (an aware one), ``a`` + 4-byte signed days since
  1970-01-01 (a ``date``), ``e`` + 8-byte microseconds (a ``timedelta``), ``x`` + u32 length +
  ASCII digits (a ``Decimal``, as ``str`` writes it).

``AvroSerializer`` encodes one Avro datum (binary encoding, no container) with a given schema;
``DataclassSerializer`` encodes instances of a dataclass the same way, with the Avro schema derived
from its fields (:mod:`tidemark.state.dataclass_avro`). Each serializer has a ``serializer_id`` and a
JSON-able ``config`` recorded in snapshots; the two Avro ones record their schema, so that state
they wrote evolves by Avro's rules when the schema changes (:mod:`tidemark.state.schema_evolution`).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import struct
from typing import Any, Callable, Protocol, runtime_checkable

_Q = struct.Struct(">q")
_D = struct.Struct(">d")
_U32 = struct.Struct(">I")
_QI = struct.Struct(">qi")
_I = struct.Struct(">i")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1).toordinal()
_MICRO = dt.timedelta(microseconds=1)
_PACK_Q, _PACK_D, _PACK_U32 = _Q.pack, _D.pack, _U32.pack
_UNPACK_Q, _UNPACK_D, _UNPACK_U32 = _Q.unpack_from, _D.unpack_from, _U32.unpack_from


class SerializationError(ValueError):
    """A value cannot be encoded, or bytes cannot be decoded, by a serializer."""


@runtime_checkable
class Serializer(Protocol):
    """Turns values into bytes and back; stateless, thread-safe, lives as long as its state."""

    serializer_id: str

    def serialize(self, value: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...

    def config(self) -> dict[str, Any]:
        """JSON-able description recorded in snapshots (enough to rebuild the serializer)."""


def _enc_int(value: int, out: list[bytes]) -> None:
    if -(1 << 63) <= value < (1 << 63):
        out.append(b"i" + _PACK_Q(value))
    else:
        raw = value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
        out.append(b"I" + _PACK_U32(len(raw)) + raw)


def _enc_seq(tag: bytes, value: Any, out: list[bytes]) -> None:
    out.append(tag + _PACK_U32(len(value)))
    for item in value:
        _encode(item, out)


def _encode(value: Any, out: list[bytes]) -> None:
    kind = type(value)
    if kind is int:
        _enc_int(value, out)
    elif kind is str:
        raw = value.encode("utf-8")
        out.append(b"s" + _PACK_U32(len(raw)) + raw)
    elif value is None:
        out.append(b"N")
    elif kind is bool:
        out.append(b"T" if value else b"F")
    elif kind is float:
        out.append(b"d" + _PACK_D(value))
    elif kind is bytes:
        out.append(b"b" + _PACK_U32(len(value)) + value)
    elif kind is list:
        _enc_seq(b"l", value, out)
    elif kind is tuple:
        _enc_seq(b"t", value, out)
    elif kind is dict:
        out.append(b"m" + _PACK_U32(len(value)))
        for key, item in value.items():
            _encode(key, out)
            _encode(item, out)
    else:
        _encode_other(value, kind, out)


def _encode_other(value: Any, kind: type, out: list[bytes]) -> None:
    """The values of a Spark row besides the JSON-like ones (see the module docstring)."""
    if kind is dt.datetime:
        offset = value.utcoffset()
        naive = value.replace(tzinfo=None) - (offset or dt.timedelta(0))
        micros = (naive - _EPOCH) // _MICRO
        out.append(b"Z" + _PACK_Q(micros) if offset is None else b"z" + _QI.pack(micros, offset // dt.timedelta(seconds=1)))
    elif kind is dt.date:
        out.append(b"a" + _I.pack(value.toordinal() - _EPOCH_DAY))
    elif kind is dt.timedelta:
        micros = value // _MICRO
        if not -(1 << 63) <= micros < (1 << 63):
            raise SerializationError(f"TaggedSerializer cannot encode a timedelta beyond 64-bit microseconds: {value}")
        out.append(b"e" + _PACK_Q(micros))
    elif kind is decimal.Decimal:
        raw = str(value).encode("ascii")
        out.append(b"x" + _PACK_U32(len(raw)) + raw)
    else:
        raise SerializationError(f"TaggedSerializer cannot encode {kind.__name__}")


def _decode(data: bytes, pos: int) -> tuple[Any, int]:
    tag = data[pos]
    pos += 1
    if tag == 0x69:  # i
        return _UNPACK_Q(data, pos)[0], pos + 8
    if tag == 0x73 or tag == 0x62:  # s, b
        (size,) = _UNPACK_U32(data, pos)
        end = pos + 4 + size
        if end > len(data):
            raise SerializationError("truncated string or bytes")
        raw = data[pos + 4 : end]
        return (raw.decode("utf-8") if tag == 0x73 else bytes(raw)), end
    if tag == 0x4E:
        return None, pos
    if tag == 0x54 or tag == 0x46:
        return tag == 0x54, pos
    if tag == 0x64:
        return _UNPACK_D(data, pos)[0], pos + 8
    if tag == 0x49:
        (size,) = _UNPACK_U32(data, pos)
        return int.from_bytes(data[pos + 4 : pos + 4 + size], "big", signed=True), pos + 4 + size
    if tag == 0x6C or tag == 0x74 or tag == 0x6D:
        return _decode_container(tag, data, pos)
    return _decode_other(tag, data, pos)


def _decode_other(tag: int, data: bytes, pos: int) -> tuple[Any, int]:
    if tag == 0x5A:  # Z
        return _EPOCH + _UNPACK_Q(data, pos)[0] * _MICRO, pos + 8
    if tag == 0x7A:  # z
        micros, offset = _QI.unpack_from(data, pos)
        zone = dt.timezone(dt.timedelta(seconds=offset))
        return (_EPOCH + micros * _MICRO + dt.timedelta(seconds=offset)).replace(tzinfo=zone), pos + 12
    if tag == 0x61:  # a
        return dt.date.fromordinal(_I.unpack_from(data, pos)[0] + _EPOCH_DAY), pos + 4
    if tag == 0x65:  # e
        return _UNPACK_Q(data, pos)[0] * _MICRO, pos + 8
    if tag == 0x78:  # x
        (size,) = _UNPACK_U32(data, pos)
        end = pos + 4 + size
        if end > len(data):
            raise SerializationError("truncated decimal")
        try:
            return decimal.Decimal(data[pos + 4:end].decode("ascii")), end
        except (decimal.InvalidOperation, UnicodeDecodeError):
            raise SerializationError("malformed decimal") from None
    raise SerializationError(f"unknown tag byte {tag:#x} at offset {pos - 1}")


def _decode_container(tag: int, data: bytes, pos: int) -> tuple[Any, int]:
    (count,) = _UNPACK_U32(data, pos)
    pos += 4
    if tag == 0x6D:
        result: dict[Any, Any] = {}
        for _ in range(count):
            key, pos = _decode(data, pos)
            result[key], pos = _decode(data, pos)
        return result, pos
    items = []
    for _ in range(count):
        item, pos = _decode(data, pos)
        items.append(item)
    return (items if tag == 0x6C else tuple(items)), pos


class TaggedSerializer:
    """The default codec (see the module docstring); round-trips bytes and tuples exactly."""

    serializer_id = "tidemark.tagged.v1"

    def serialize(self, value: Any) -> bytes:
        if type(value) is int and -(1 << 63) <= value < (1 << 63):
            return b"i" + _PACK_Q(value)
        out: list[bytes] = []
        _encode(value, out)
        return b"".join(out)

    def deserialize(self, data: bytes) -> Any:
        try:
            if data[0] == 0x69 and len(data) == 9:
                return _UNPACK_Q(data, 1)[0]
            value, end = _decode(data, 0)
        except (IndexError, struct.error, UnicodeDecodeError) as exc:
            raise SerializationError(f"malformed tagged value: {exc}") from None
        if end != len(data):
            raise SerializationError(f"{len(data) - end} trailing bytes after tagged value")
        return value

    def config(self) -> dict[str, Any]:
        return {}


class AvroSerializer:
    """One Avro datum in binary encoding, written and read with ``schema`` (a JSON string/dict)."""

    serializer_id = "avro.binary.v1"

    def __init__(self, schema: str | dict[str, Any]) -> None:
        import avro.io
        import avro.schema

        self._schema_json = schema if isinstance(schema, str) else json.dumps(schema)
        self._schema = avro.schema.parse(self._schema_json)
        self._writer = avro.io.DatumWriter(self._schema)
        self._reader = avro.io.DatumReader(self._schema, self._schema)
        self._encoder_type = avro.io.BinaryEncoder
        self._decoder_type = avro.io.BinaryDecoder

    def serialize(self, value: Any) -> bytes:
        buffer = io.BytesIO()
        try:
            self._writer.write(value, self._encoder_type(buffer))
        except Exception as exc:  # avro raises several unrelated types
            raise SerializationError(f"value does not match the Avro schema: {exc}") from None
        return buffer.getvalue()

    def deserialize(self, data: bytes) -> Any:
        try:
            return self._reader.read(self._decoder_type(io.BytesIO(data)))
        except Exception as exc:
            raise SerializationError(f"malformed Avro datum: {exc}") from None

    def config(self) -> dict[str, Any]:
        return {"schema": self._schema_json}


class DataclassSerializer(AvroSerializer):
    """Instances of the dataclass ``cls``, as Avro datums of the schema derived from its fields
    (:func:`tidemark.state.dataclass_avro.avro_schema_of`; nested dataclasses, lists and maps of
    them included)."""

    serializer_id = "tidemark.dataclass.v1"

    def __init__(self, cls: type) -> None:
        from tidemark.state.dataclass_avro import avro_schema_of, from_datum, to_datum

        super().__init__(avro_schema_of(cls))
        self.cls = cls
        self._to_datum, self._from_datum = to_datum, from_datum

    def serialize(self, value: Any) -> bytes:
        if not isinstance(value, self.cls):
            raise SerializationError(f"DataclassSerializer({self.cls.__name__}) cannot encode "
                                     f"{type(value).__name__}")
        return super().serialize(self._to_datum(value))

    def deserialize(self, data: bytes) -> Any:
        return self._from_datum(self.cls, super().deserialize(data))

    def config(self) -> dict[str, Any]:
        return {"schema": self._schema_json, "class": f"{self.cls.__module__}:{self.cls.__qualname__}"}


DEFAULT_SERIALIZER = TaggedSerializer()
SCHEMA_SERIALIZER_IDS = frozenset({AvroSerializer.serializer_id, DataclassSerializer.serializer_id})

_FACTORIES: dict[str, Callable[[dict[str, Any]], Serializer]] = {
    TaggedSerializer.serializer_id: lambda config: DEFAULT_SERIALIZER,
    AvroSerializer.serializer_id: lambda config: AvroSerializer(config["schema"]),
    # without the job's code: the datums as dicts
    DataclassSerializer.serializer_id: lambda config: AvroSerializer(config["schema"]),
}


def serializer_from_config(serializer_id: str, config: dict[str, Any]) -> Serializer:
    """Rebuild a serializer recorded in a snapshot."""
    try:
        factory = _FACTORIES[serializer_id]
    except KeyError:
        raise SerializationError(f"unknown serializer id {serializer_id!r}") from None
    return factory(config)


def describe(serializer: Serializer) -> dict[str, Any]:
    """What a snapshot records about ``serializer``."""
    return {"id": serializer.serializer_id, "config": serializer.config()}


# ---------------------------------------------------------------- list framing (byte level)


def frame_elements(elements: list[bytes]) -> bytes:
    """A list value at byte level: each element as u32 length + bytes, concatenated."""
    return b"".join(_PACK_U32(len(e)) + e for e in elements)


def frame_element(element: bytes) -> bytes:
    return _PACK_U32(len(element)) + element


def unframe_elements(data: bytes) -> list[bytes]:
    """Inverse of :func:`frame_elements`; ``SerializationError`` on a truncated frame."""
    out, pos, size = [], 0, len(data)
    while pos < size:
        if pos + 4 > size:
            raise SerializationError("truncated list frame")
        (length,) = _UNPACK_U32(data, pos)
        end = pos + 4 + length
        if end > size:
            raise SerializationError("truncated list element")
        out.append(data[pos + 4 : end])
        pos = end
    return out
