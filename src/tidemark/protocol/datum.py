"""Protocol dataclasses <-> Avro datums (plain dicts, lists, str enum symbols, bytes, ints).

A :class:`RecordPlan` converts one dataclass field by field; it is built once per class from the
type hints and cached. The reference encoder and decoder (:mod:`tidemark.protocol.avro_reference`)
work on datums; the compiled ones (:mod:`tidemark.protocol.avro_compiled`) do not need them.
Plans are immutable and thread-safe.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tidemark.protocol.errors import EncodeError

M = TypeVar("M")
Convert = Callable[[Any], Any]


def _converters(hint: Any) -> tuple[Convert | None, Convert | None]:
    """(to_avro, from_avro) for a type hint of a message field; ``None`` means identity."""
    while hasattr(hint, "__supertype__"):  # typing.NewType
        hint = hint.__supertype__
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return (lambda v: v.value), hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        plan = record_plan(hint)
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
class RecordPlan:
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


_PLANS: dict[type, RecordPlan] = {}


def record_plan(cls: type) -> RecordPlan:
    """The plan of ``cls`` (cached per class)."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = typing.get_type_hints(cls)
        fields = tuple((f.name, *_converters(hints[f.name])) for f in dataclasses.fields(cls))
        plan = _PLANS[cls] = RecordPlan(cls, fields)
    return plan


def to_datum(message: object) -> dict[str, Any]:
    """The Avro datum (plain dicts, lists, str symbols) of a protocol dataclass."""
    return record_plan(type(message)).to_avro(message)


def from_datum(cls: type[M], datum: dict[str, Any]) -> M:
    """The protocol dataclass ``cls`` built from an Avro datum read with its newest schema."""
    result: M = record_plan(cls).from_avro(datum)
    return result
