"""Avro writers and readers compiled for one message dataclass and one record schema.

:func:`compile_record` turns (dataclass, Avro record schema) into two plain Python functions,
generated once from the schema and the type hints and then ``exec``-uted:

* ``write(message, out)`` appends the Avro binary body of ``message`` to the ``bytearray``
  ``out``, reading the dataclass attributes directly (no intermediate datum). Ints are checked
  against their Avro type (``int``: 32 bits, ``long``: 64 bits); a value of the wrong type
  raises ``TypeError``, ``ValueError``, ``AttributeError`` or ``KeyError``.
* ``read(data, pos)`` reads a body written with the SAME schema starting at ``data[pos]`` and
  returns ``(message, end)``. Every length and count is bounded by the bytes present; any
  malformation raises some exception, and the caller asks the reference decoder
  (:mod:`tidemark.protocol.avro_reference`) why. Schema resolution (another writer version) is
  not handled here.

Both write exactly the bytes of the avro package's encoder (``tests/unit/protocol/golden``).
Supported: records, string, bytes, int, long, boolean, enum, ``["null", T]`` unions, arrays
and maps; :class:`UnsupportedSchema` otherwise. Compiled functions are pure and thread-safe.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

import avro.schema

Writer = Callable[[Any, bytearray], None]
Reader = Callable[[bytes, int], tuple[Any, int]]

_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


class UnsupportedSchema(TypeError):
    """The schema uses an Avro type the compiler does not generate code for."""


def write_long(out: bytearray, n: int) -> None:
    """Append the zig-zag varint of ``n`` (Avro ``int`` and ``long``)."""
    n = (n << 1) ^ (n >> 63)
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``data[pos]`` and the position after it."""
    b = data[pos]
    n, shift = b & 0x7F, 7
    while b & 0x80:
        if shift >= 70:
            raise ValueError("varint is too long")
        pos += 1
        b = data[pos]
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos + 1


def _plain(hint: Any) -> Any:
    while hasattr(hint, "__supertype__"):  # typing.NewType
        hint = hint.__supertype__
    return hint


def _optional_arg(hint: Any) -> Any:
    (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return inner


def _hints(cls: type, schema: avro.schema.RecordSchema) -> dict[str, Any]:
    """The type hints of ``cls``, which must have exactly the fields of ``schema``, in order."""
    hints = typing.get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    if fields != [f.name for f in schema.fields]:
        raise UnsupportedSchema(f"{cls.__name__} fields {fields} differ from {schema.fullname}")
    return hints


class _Compiler:
    """Collects the generated functions of one record and the records nested in it."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"write_long": write_long, "read_long": read_long}
        self.functions: list[str] = []
        self.compiled: dict[tuple[str, type], str] = {}

    def constant(self, value: Any) -> str:
        name = f"K{len(self.namespace)}"
        self.namespace[name] = value
        return name

    # ------------------------------------------------------------------ writers

    def writer(self, cls: type, schema: avro.schema.RecordSchema) -> str:
        key = ("write", cls)
        if key not in self.compiled:
            name = self.compiled[key] = f"write_{cls.__name__}"
            hints = _hints(cls, schema)
            lines = [f"def {name}(o, out):",
                     f"    if type(o) is not {self.constant(cls)}:",
                     f"        raise TypeError('expected {cls.__name__}, got ' + type(o).__name__)"]
            for field in schema.fields:
                lines.append(f"    v = o.{field.name}")
                lines += self._write(hints[field.name], field.type, "v", 1)
            self.functions.append("\n".join(lines))
        return self.compiled[key]

    def _write(self, hint: Any, schema: avro.schema.Schema, var: str, depth: int) -> list[str]:
        pad, kind, hint = "    " * depth, schema.type, _plain(hint)
        if kind == "string":
            return [f"{pad}b = {var}.encode()", f"{pad}write_long(out, len(b))", f"{pad}out += b"]
        if kind == "bytes":
            return [f"{pad}write_long(out, len({var}))", f"{pad}out += {var}"]
        if kind in _RANGES:
            low, high = _RANGES[kind]
            return [f"{pad}if not {low} <= {var} <= {high}:",
                    f"{pad}    raise ValueError(str({var}) + ' does not fit an Avro {kind}')",
                    f"{pad}write_long(out, {var})"]
        if kind == "boolean":
            return [f"{pad}out.append(1 if {var} else 0)"]
        if kind == "enum":
            index = self.constant({hint(symbol): i for i, symbol in enumerate(schema.symbols)})
            return [f"{pad}write_long(out, {index}[{var}])"]
        if kind == "record":
            return [f"{pad}{self.writer(hint, schema)}({var}, out)"]
        if kind == "union":
            null, other, branch = self._optional(schema)
            return [f"{pad}if {var} is None:", f"{pad}    out.append({2 * null})", f"{pad}else:",
                    f"{pad}    out.append({2 * other})", *self._write(_optional_arg(hint), branch, var, depth + 1)]
        if kind in ("array", "map"):
            item, key = f"x{depth}", f"k{depth}"
            if kind == "array":
                loop = [f"{pad}    for {item} in {var}:"]
                body = self._write(typing.get_args(hint)[0], schema.items, item, depth + 2)
            else:
                loop = [f"{pad}    for {key}, {item} in {var}.items():", f"{pad}        b = {key}.encode()",
                        f"{pad}        write_long(out, len(b))", f"{pad}        out += b"]
                body = self._write(typing.get_args(hint)[1], schema.values, item, depth + 2)
            return [f"{pad}if {var}:", f"{pad}    write_long(out, len({var}))", *loop, *body, f"{pad}out.append(0)"]
        raise UnsupportedSchema(f"no compiled writer for Avro type {kind}")

    # ------------------------------------------------------------------ readers

    def reader(self, cls: type, schema: avro.schema.RecordSchema) -> str:
        key = ("read", cls)
        if key not in self.compiled:
            name = self.compiled[key] = f"read_{cls.__name__}"
            hints = _hints(cls, schema)
            lines, names = [f"def {name}(data, pos):"], []
            for i, field in enumerate(schema.fields):
                names.append(f"f{i}")
                lines += self._read(hints[field.name], field.type, f"f{i}", 1)
            lines.append(f"    return {self.constant(cls)}({', '.join(names)}), pos")
            self.functions.append("\n".join(lines))
        return self.compiled[key]

    def _read(self, hint: Any, schema: avro.schema.Schema, var: str, depth: int) -> list[str]:
        pad, kind, hint = "    " * depth, schema.type, _plain(hint)
        if kind in ("string", "bytes"):
            return [f"{pad}n, pos = read_long(data, pos)", f"{pad}end = pos + n",
                    f"{pad}if n < 0 or end > len(data):", f"{pad}    raise ValueError('length out of bounds')",
                    f"{pad}{var} = data[pos:end]{'.decode()' if kind == 'string' else ''}", f"{pad}pos = end"]
        if kind in _RANGES:
            return [f"{pad}{var}, pos = read_long(data, pos)"]
        if kind == "boolean":
            return [f"{pad}{var} = data[pos] == 1", f"{pad}pos += 1"]
        if kind == "enum":
            members = self.constant(tuple(hint(symbol) for symbol in schema.symbols))
            return [f"{pad}n, pos = read_long(data, pos)", f"{pad}if n < 0:", f"{pad}    raise ValueError('enum index')",
                    f"{pad}{var} = {members}[n]"]
        if kind == "record":
            return [f"{pad}{var}, pos = {self.reader(hint, schema)}(data, pos)"]
        if kind == "union":
            null, other, branch = self._optional(schema)
            return [f"{pad}n, pos = read_long(data, pos)", f"{pad}if n == {null}:", f"{pad}    {var} = None",
                    f"{pad}elif n == {other}:", *self._read(_optional_arg(hint), branch, var, depth + 1),
                    f"{pad}else:", f"{pad}    raise ValueError('union branch out of range')"]
        if kind in ("array", "map"):
            item, key, acc = f"x{depth}", f"k{depth}", f"a{depth}"
            if kind == "array":
                body = [*self._read(typing.get_args(hint)[0], schema.items, item, depth + 2),
                        f"{pad}        {acc}.append({item})"]
                start, result = f"{pad}{acc} = []", f"{pad}{var} = tuple({acc})"
            else:
                body = [*self._read(str, avro.schema.PrimitiveSchema("string"), key, depth + 2),
                        *self._read(typing.get_args(hint)[1], schema.values, item, depth + 2),
                        f"{pad}        {acc}[{key}] = {item}"]
                start, result = f"{pad}{acc} = {{}}", f"{pad}{var} = {acc}"
            # Every item takes at least one byte, so a count above the bytes left is malformed.
            return [start, f"{pad}while True:", f"{pad}    n, pos = read_long(data, pos)",
                    f"{pad}    if n == 0:", f"{pad}        break", f"{pad}    if n < 0:",
                    f"{pad}        n = -n", f"{pad}        _, pos = read_long(data, pos)",
                    f"{pad}    if n > len(data) - pos:", f"{pad}        raise ValueError('count out of bounds')",
                    f"{pad}    for _ in range(n):", *body, result]
        raise UnsupportedSchema(f"no compiled reader for Avro type {kind}")

    @staticmethod
    def _optional(schema: avro.schema.UnionSchema) -> tuple[int, int, avro.schema.Schema]:
        kinds = [s.type for s in schema.schemas]
        if len(kinds) != 2 or "null" not in kinds:
            raise UnsupportedSchema(f"only [null, T] unions are compiled, not {kinds}")
        null = kinds.index("null")
        return null, 1 - null, schema.schemas[1 - null]

    def build(self, *names: str) -> list[Any]:
        exec(compile("\n\n".join(self.functions), "<tidemark.protocol.avro_compiled>", "exec"), self.namespace)
        return [self.namespace[name] for name in names]


def compile_record(cls: type, schema: avro.schema.RecordSchema) -> tuple[Writer, Reader]:
    """The compiled ``(write, read)`` pair of ``cls`` for ``schema`` (a physical schema: no
    logical types); raises :class:`UnsupportedSchema`."""
    compiler = _Compiler()
    write, read = compiler.build(compiler.writer(cls, schema), compiler.reader(cls, schema))
    return write, read
