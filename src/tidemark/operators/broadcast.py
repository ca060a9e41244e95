"""Broadcast state as a broadcast function sees it (Flink's broadcast state pattern).

A stage with a broadcast input (:attr:`tidemark.api.Input.broadcast`) hands each of that input's
elements to every one of its tasks (:mod:`tidemark.runtime.worker.inputs`), where the
:class:`~tidemark.api.BroadcastProcessFunction`'s ``process_broadcast_element`` updates the
broadcast states with :class:`BroadcastSideContext`; ``process_element`` and ``on_timer`` read
them through :class:`ReadOnlyBroadcastState`. Every task applies the same elements in the same
order, so every task holds the same states: they are the task's operator state in
:attr:`~tidemark.types.OperatorStateMode.BROADCAST` mode, in every checkpoint, and a restore at
any parallelism gives each new task one old copy (:func:`tidemark.state.rescale.redistribute_list`).

Lifecycle: one :class:`BroadcastStates` per operator, made in ``initialize_state`` over the task's
operator state (after its restore); a state is registered on its first use by name, so one that
was restored and never asked for stays in the snapshots as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tidemark.operators.lifecycle import OutputRecord
from tidemark.operators.time import StageTime
from tidemark.operators.udf import UNKEYED, EmittingContext, users_descriptor
from tidemark.api import Stage
from tidemark.state import BroadcastState, BroadcastStateDescriptor, KeyedStateBackend, OperatorStateBackend


class ReadOnlyBroadcastState:
    """A broadcast state read-only (Flink's ``ReadOnlyBroadcastState``): the side of a function
    that sees one task's records must not change what every task holds."""

    __slots__ = ("_state",)

    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    def keys(self) -> Iterator[Any]:
        return self._state.keys()

    def values(self) -> Iterator[Any]:
        return self._state.values()

    def items(self) -> Iterator[tuple[Any, Any]]:
        return self._state.items()

    def is_empty(self) -> bool:
        return self._state.is_empty()


class BroadcastStates:
    """The broadcast states of one task's function, by descriptor, in its operator state."""

    def __init__(self, store: OperatorStateBackend) -> None:
        self._store = store
        self._read_only: dict[str, ReadOnlyBroadcastState] = {}

    def writable(self, descriptor: BroadcastStateDescriptor) -> BroadcastState:
        return self._store.get_broadcast_state(users_descriptor(descriptor))

    def read_only(self, descriptor: BroadcastStateDescriptor) -> ReadOnlyBroadcastState:
        view = self._read_only.get(descriptor.name)
        if view is None:
            view = self._read_only[descriptor.name] = ReadOnlyBroadcastState(self.writable(descriptor))
        return view


class BroadcastSideContext(EmittingContext):
    """What ``process_broadcast_element`` sees (:class:`tidemark.api.BroadcastContext`): no key."""

    __slots__ = ("states", "backend", "time", "stage", "out", "timestamp_ms")
    key = None

    def __init__(self, states: BroadcastStates, backend: KeyedStateBackend | None, time: StageTime, stage: Stage,
                 out: list[OutputRecord]) -> None:
        self.states, self.backend, self.time, self.stage, self.out = states, backend, time, stage, out
        self.timestamp_ms = 0

    def get_broadcast_state(self, descriptor: BroadcastStateDescriptor) -> BroadcastState:
        return self.states.writable(descriptor)

    def apply_to_keyed_state(self, descriptor: Any, function: Callable[[Any, Any], None]) -> None:
        """``function(key, state)`` for each key of the task holding ``descriptor``'s state, in key
        group order; the keys are listed first, so ``function`` may update or clear the state."""
        backend = self.backend
        if backend is None:
            raise RuntimeError(UNKEYED.format(what="apply_to_keyed_state", stage=self.stage.name))
        state = backend.get_state(descriptor)
        for key in list(backend.keys(descriptor.name)):
            backend.set_current_key(key)
            function(key, state)

    def current_watermark(self) -> int:
        return self.time.watermark

    def current_processing_time(self) -> int:
        return self.time.clock()
