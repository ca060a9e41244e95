"""State descriptors: name, kind, serializers, default and TTL of a piece of state."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Protocol

from tidemark.state.serializers import DEFAULT_SERIALIZER, Serializer
from tidemark.state.ttl import StateTtlConfig


class StateKind(str, enum.Enum):
    VALUE = "VALUE"
    LIST = "LIST"
    MAP = "MAP"
    REDUCING = "REDUCING"
    AGGREGATING = "AGGREGATING"


class AggregateFunction(Protocol):
    """Flink's AggregateFunction: accumulator in, result out."""

    def create_accumulator(self) -> Any: ...

    def add(self, value: Any, accumulator: Any) -> Any: ...

    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any: ...


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name.encode("utf-8")) > 200:
        raise ValueError(f"a state name must be a non-empty string under 200 bytes: {name!r}")


@dataclass(frozen=True)
class ValueStateDescriptor:
    """A single value per (key, namespace); reads ``default`` when empty."""

    name: str
    default: Any = None
    serializer: Serializer | None = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.VALUE

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclass(frozen=True)
class ListStateDescriptor:
    """A list per (key, namespace); ``serializer`` encodes one element."""

    name: str
    serializer: Serializer | None = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.LIST

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclass(frozen=True)
class MapStateDescriptor:
    """A map per (key, namespace); TTL applies to each entry."""

    name: str
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.MAP

    def __post_init__(self) -> None:
        _check_name(self.name)



@dataclass(frozen=True)
class ReducingStateDescriptor:
    """A value folded with ``reduce_function(old, new)`` on every ``add``."""

    name: str
    reduce_function: Callable[[Any, Any], Any]
    serializer: Serializer | None = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.REDUCING

    def __post_init__(self) -> None:
        _check_name(self.name)


@dataclass(frozen=True)
class AggregatingStateDescriptor:
    """An accumulator updated by ``aggregate_function``; ``serializer`` encodes accumulators."""

    name: str
    aggregate_function: AggregateFunction
    serializer: Serializer | None = None
    ttl: StateTtlConfig | None = None
    kind = StateKind.AGGREGATING

    def __post_init__(self) -> None:
        _check_name(self.name)


StateDescriptor = (
    ValueStateDescriptor
    | ListStateDescriptor
    | MapStateDescriptor
    | ReducingStateDescriptor
    | AggregatingStateDescriptor
)


def value_serializer_of(descriptor: StateDescriptor) -> Serializer:
    """Serializer of the stored value: the value, list element, map value or accumulator."""
    if isinstance(descriptor, MapStateDescriptor):
        return descriptor.value_serializer or DEFAULT_SERIALIZER
    return descriptor.serializer or DEFAULT_SERIALIZER


def user_key_serializer_of(descriptor: StateDescriptor) -> Serializer:
    """Serializer of map keys (the default codec for other kinds)."""
    if isinstance(descriptor, MapStateDescriptor):
        return descriptor.key_serializer or DEFAULT_SERIALIZER
    return DEFAULT_SERIALIZER
