"""Keyed-state operations as data: ``("<state>.<method>", key, namespace, *args)`` tuples applied
to a backend's value, list, map and reducing (sum) states. Shared by the state property tests
and the changelog tests, which draw the tuples in their own ways."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tidemark.state import (
    KeyedStateBackend,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

DESCRIPTORS = {
    "value": ValueStateDescriptor("value"),
    "list": ListStateDescriptor("list"),
    "map": MapStateDescriptor("map"),
    "sum": ReducingStateDescriptor("sum", lambda a, b: a + b),
}


def apply_ops(backend: KeyedStateBackend, ops: Iterable[tuple[Any, ...]]) -> None:
    """Run each operation on the state it names, under its key and namespace."""
    states = {name: backend.get_state(d) for name, d in DESCRIPTORS.items()}
    for op in ops:
        name, method = op[0].split(".")
        backend.set_current_key(op[1])
        state = states[name]
        state.set_current_namespace(op[2])
        getattr(state, method)(*op[3:])
