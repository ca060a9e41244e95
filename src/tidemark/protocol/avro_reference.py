"""The reference Avro encoder and decoder, on the ``avro`` package (Apache Avro's own Python code).

The codec's hot path uses the functions compiled for each message
(:mod:`tidemark.protocol.avro_compiled`, faster than fastavro there: ``bench/bench_avro_encoding.py``);
this module is what that path is checked against and what it falls back on:

* the golden tests prove that the compiled functions (and fastavro) write the same bytes as
  :class:`ReferenceWriter` and read the same messages as :class:`ReferenceReader`, for every
  schema version;
* a body of an older writer schema (schema resolution) is read here, and when the compiled reader
  refuses a body, :class:`ReferenceReader` reads it again to say precisely why (:class:`Truncated`
  versus any other malformation), with every read bounded by the bytes present.

Both are built once per schema (pair) and are then immutable, safe to share between threads.
"""

from __future__ import annotations

from typing import Any

import avro.errors
import avro.io
import avro.schema


class Truncated(Exception):
    """The body ended before a value it declares."""


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
            raise Truncated(f"needed {n} bytes, {len(self._buf) - start} left")
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
            raise Truncated("body ends inside a varint") from None
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

    The datum always comes from a typed dataclass through a :class:`~tidemark.protocol.datum.RecordPlan`;
    every leaf is still type-checked here or in ``write_data``, and :class:`_BufferEncoder` bounds ints.
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


class ReferenceWriter:
    """Writes datums of one schema as Avro binary bodies (no header) with the avro package."""

    def __init__(self, schema: avro.schema.RecordSchema) -> None:
        self._writer = _UncheckedWriter(schema)

    def write(self, datum: dict[str, Any], out: bytearray) -> None:
        """Append the body of ``datum`` to ``out``; raises the avro package's errors,
        ``TypeError`` or ``ValueError`` (an int outside its Avro type) on a bad datum."""
        self._writer.write(datum, _BufferEncoder(out))


class ReferenceReader:
    """Reads bodies written with ``writer`` into datums of ``reader`` (Avro schema resolution).

    The pair must already be known compatible (the codec checks it once per schema id).
    """

    def __init__(self, writer: avro.schema.RecordSchema, reader: avro.schema.RecordSchema) -> None:
        self._reader = _ResolvedReader(writer, reader)

    def read(self, data: bytes, start: int) -> tuple[Any, int]:
        """The datum whose body starts at ``data[start]`` and how many bytes follow it.

        Raises :class:`Truncated` when the body ends early; any other exception means the body
        is malformed."""
        decoder = _BoundedDecoder(data, start)
        datum = self._reader.read(decoder)
        return datum, decoder.bytes_remaining()
