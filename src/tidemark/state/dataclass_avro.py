"""The Avro schema of a Python dataclass, and its values as Avro datums and back: what
:class:`~tidemark.state.serializers.DataclassSerializer` stores, so that dataclass state evolves by
Avro's rules (:mod:`tidemark.state.schema_evolution`).

A dataclass is a record named after the class; each field is a record field of the same name, its
type from the annotation:

========================================  ==============================================
``int`` / ``float`` / ``str``             ``long`` / ``double`` / ``string``
``bool`` / ``bytes``                      ``boolean`` / ``bytes``
``list[T]``, ``tuple[T, ...]``            ``array`` of ``T``
``dict[str, T]``                          ``map`` of ``T``
a dataclass                               a nested record
``T | None`` (``Optional[T]``)            ``["null", T]``
========================================  ==============================================

A field's default (or a ``default_factory`` of ``list``/``dict``) is the Avro default, which is
what lets a field be added to state that was written without it; ``field(metadata={"aliases":
["old_name"]})`` renames a field the stored values know by ``old_name``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

_PRIMITIVES: dict[Any, str] = {int: "long", float: "double", str: "string", bool: "boolean", bytes: "bytes"}


class DataclassSchemaError(TypeError):
    """A dataclass whose fields have no Avro equivalent."""


def avro_schema_of(cls: type) -> dict[str, Any]:
    """The Avro record schema of dataclass ``cls`` (see the module docstring)."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise DataclassSchemaError(f"{cls!r} is not a dataclass")
    return _record(cls, set())


def _record(cls: type, seen: set[type]) -> Any:
    if cls in seen:
        return cls.__name__  # a record used again: by name
    seen.add(cls)
    hints = typing.get_type_hints(cls)
    fields = []
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        entry: dict[str, Any] = {"name": field.name, "type": _type(hints[field.name], f"{cls.__name__}.{field.name}", seen)}
        default = _default(field)
        if default is not dataclasses.MISSING:
            if isinstance(entry["type"], list) and default is not None:  # a union's default is of its first branch
                entry["type"] = [branch for branch in entry["type"] if branch != "null"] + ["null"]
            entry["default"] = default
        if field.metadata.get("aliases"):
            entry["aliases"] = list(field.metadata["aliases"])
        fields.append(entry)
    return {"type": "record", "name": cls.__name__, "fields": fields}


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING and field.default_factory in (list, dict, tuple):
        value = field.default_factory()
    else:
        return dataclasses.MISSING
    if isinstance(value, bytes):
        return value.decode("latin-1")  # Avro's JSON form of a bytes default: one character per byte
    return to_datum(list(value) if isinstance(value, tuple) else value)


def _type(hint: Any, where: str, seen: set[type]) -> Any:
    if hint in _PRIMITIVES:
        return _PRIMITIVES[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, seen)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        branches = [_type(arg, where, seen) for arg in args if arg is not type(None)]
        return (["null"] if type(None) in args else []) + branches
    if origin in (list, tuple) and args and (origin is list or (len(args) == 2 and args[1] is Ellipsis)):
        return {"type": "array", "items": _type(args[0], where, seen)}
    if origin is dict and len(args) == 2 and args[0] is str:
        return {"type": "map", "values": _type(args[1], where, seen)}
    raise DataclassSchemaError(f"{where}: {hint!r} has no Avro type (use int, float, str, bool, bytes, "
                               "list[T], dict[str, T], T | None or a dataclass)")


def to_datum(value: Any) -> Any:
    """A dataclass instance (nested ones, lists, tuples and dicts of them) as an Avro datum."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_datum(getattr(value, field.name)) for field in dataclasses.fields(value) if field.init}
    if isinstance(value, (list, tuple)):
        return [to_datum(item) for item in value]
    if isinstance(value, dict):
        return {key: to_datum(item) for key, item in value.items()}
    return value


def from_datum(cls: type, datum: Any) -> Any:
    """The instance of dataclass ``cls`` an Avro datum read with ``cls``'s schema describes."""
    return _value(cls, datum)


def _value(hint: Any, datum: Any) -> Any:
    if datum is None:
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        return hint(**{field.name: _value(hints[field.name], datum[field.name]) for field in dataclasses.fields(hint)
                       if field.init and field.name in datum})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        branches = [arg for arg in args if arg is not type(None)]
        return _value(branches[0], datum) if len(branches) == 1 else datum
    if origin is list:
        return [_value(args[0], item) for item in datum]
    if origin is tuple:
        return tuple(_value(args[0], item) for item in datum)
    if origin is dict:
        return {key: _value(args[1], item) for key, item in datum.items()}
    return datum
