"""The operators that run a user's function (Flink's ``KeyedProcessOperator`` and
``ProcessOperator``, both ``AbstractUdfStreamOperator`` s): they turn the operator lifecycle
(:mod:`tidemark.operators.lifecycle`) into the function's hooks. :class:`KeyedProcessOperator`
runs a :class:`~tidemark.api.KeyedProcessFunction`, :class:`~tidemark.api.KeyedCoProcessFunction` or
:class:`~tidemark.api.KeyedBroadcastProcessFunction` in a keyed stage; :class:`ProcessOperator` a
:class:`~tidemark.api.ProcessFunction`, :class:`~tidemark.api.CoProcessFunction` or
:class:`~tidemark.api.BroadcastProcessFunction` in a stage without a key (no keyed state, no timers:
``ctx.get_state`` and ``ctx.timer_service()`` raise, saying so). A broadcast function's
broadcast side gets its own context (:mod:`tidemark.operators.broadcast`).

=========================================  ==============================================================
operator                                   function
=========================================  ==============================================================
``initialize_state(context)``              ``initialize_state(ctx)`` of a :class:`~tidemark.api.CheckpointedFunction`
                                           (operator state of the user's names, keyed state, ``is_restored``)
``open()``                                 ``open(ctx)``
``process_element(value, key, ts)``        ``process(value, ctx)``, or ``process_element1`` of a
                                           :class:`~tidemark.api.CoProcessFunction` (two inputs), or
                                           ``process_element`` of a broadcast function
``process_element2(value, key, ts)``       ``process_element2`` of a ``CoProcessFunction``,
                                           ``process_broadcast_element`` of a broadcast function; else ``process``
``process_watermark(w)``                   ``on_timer`` of each event-time timer at or before ``w``
``on_processing_time(t)``                  ``on_timer`` of each processing-time timer at or before ``t``
``snapshot_state(context)``                ``snapshot_state(ctx)`` of a ``CheckpointedFunction``
``notify_checkpoint_complete/aborted``     the same, of a :class:`~tidemark.api.CheckpointListener`
``close()``                                ``close()``
=========================================  ==============================================================

A timer whose ``on_timer`` raises goes to ``timer_failed`` (the stage's error policy: the worker
dead-letters it with the timer as the origin) and emits nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from tidemark.operators.broadcast import BroadcastSideContext, BroadcastStates, ReadOnlyBroadcastState
from tidemark.operators.lifecycle import OutputRecord, StateInitializationContext
from tidemark.operators.time import FunctionTimers, StageTime, TimerServiceManager
from tidemark.operators.udf import UNKEYED, EmittingContext, UdfOperator, raise_error
from tidemark.api import BroadcastProcessFunction, CoProcessFunction, KeyedProcessFunction, Stage
from tidemark.runtime.job.faults import FAULTS
from tidemark.state import KeyedStateBackend
from tidemark.state.timers import TimeDomain, Timer


class _Context(EmittingContext):
    """The ``StateContext``, ``ProcessContext`` and ``OnTimerContext`` a function sees (with a
    broadcast function's ``get_broadcast_state``, read-only)."""

    __slots__ = ("backend", "out", "stage", "key", "timestamp_ms", "time_domain", "timers", "broadcast")

    def __init__(self, backend: KeyedStateBackend | None, stage: Stage, out: list[OutputRecord],
                 broadcast: BroadcastStates | None = None) -> None:
        self.backend, self.stage, self.out, self.broadcast = backend, stage, out, broadcast
        self.key: Any = None
        self.timestamp_ms = 0
        self.time_domain: str | None = None  # in on_timer only
        self.timers: FunctionTimers | None = None

    def get_broadcast_state(self, descriptor: Any) -> ReadOnlyBroadcastState:
        if self.broadcast is None:
            raise RuntimeError(f"stage {self.stage.name!r}: broadcast state is a BroadcastProcessFunction's, "
                               f"read by process_element and written by process_broadcast_element")
        return self.broadcast.read_only(descriptor)

    def get_state(self, descriptor: Any) -> Any:
        if self.backend is None:
            raise RuntimeError(UNKEYED.format(what=f"keyed state {descriptor.name!r}", stage=self.stage.name))
        return self.backend.get_state(descriptor)

    def timer_service(self) -> FunctionTimers:
        if self.timers is None:
            if self.backend is None:
                raise RuntimeError(UNKEYED.format(what="timers", stage=self.stage.name))
            raise RuntimeError("timers are there in process and on_timer, not in open")
        return self.timers


class KeyedProcessOperator(UdfOperator):
    """Runs one instance of ``stage.function`` (see the module)."""

    def __init__(self, stage: Stage, timer_failed: Callable[[Timer, Exception], None] | None = None) -> None:
        self.stage, self.stage_name = stage, stage.name
        self.function = cast(KeyedProcessFunction, stage.function())  # type: ignore[operator]  # not Windowed here
        function: Any = self.function
        if isinstance(function, (CoProcessFunction, BroadcastProcessFunction)) and len(stage.input_list) != 2:
            raise ValueError(f"stage {stage.name}: {type(function).__name__} takes two inputs, the stage "
                             f"has {len(stage.input_list)}")
        self._second_context: Any = None  # the broadcast side's (None: process_element2 sees the first's)
        self._first: Callable[[Any, Any], None]
        self._second: Callable[[Any, Any], None]
        if isinstance(function, CoProcessFunction):
            self._first, self._second = function.process_element1, function.process_element2
        elif isinstance(function, BroadcastProcessFunction):
            self._first, self._second = function.process_element, function.process_broadcast_element
        else:
            self._first = self._second = function.process
        self.timer_failed = timer_failed or raise_error
        self._timers: TimerServiceManager | None = None
        self._ctx: _Context | None = None

    def initialize_state(self, context: StateInitializationContext) -> None:
        if context.keyed_state_backend is None or context.timer_service_manager is None:
            raise ValueError(f"stage {self.stage.name!r}: a KeyedProcessFunction needs a keyed stage")
        self._timers = context.timer_service_manager
        self._ctx = self._contexts(context)
        self.initialize_function(context)

    def _contexts(self, context: StateInitializationContext) -> _Context:
        """The function's context; a broadcast function's broadcast side gets its own."""
        backend = context.keyed_state_backend
        if not isinstance(self.function, BroadcastProcessFunction):
            return _Context(backend, self.stage, self.output)
        states = BroadcastStates(context.operator_state_store)
        self._second_context = BroadcastSideContext(states, backend, context.time or StageTime(), self.stage,
                                                    self.output)
        return _Context(backend, self.stage, self.output, states)

    def open(self) -> None:
        assert self._ctx is not None and self._timers is not None
        self.function.open(self._ctx)
        self._ctx.timers = self._timers.for_function()

    def process_element(self, value: Any, key: Any, timestamp_ms: int) -> None:
        ctx = self._ctx
        ctx.key, ctx.timestamp_ms, ctx.time_domain = key, timestamp_ms, None  # type: ignore[union-attr]
        self._first(value, ctx)  # type: ignore[arg-type]

    def process_element2(self, value: Any, key: Any, timestamp_ms: int) -> None:
        broadcast = self._second_context
        if broadcast is not None:  # a broadcast element: no key, the broadcast states to write
            broadcast.timestamp_ms = timestamp_ms
            self._second(value, broadcast)
            return
        ctx = self._ctx
        ctx.key, ctx.timestamp_ms, ctx.time_domain = key, timestamp_ms, None  # type: ignore[union-attr]
        self._second(value, ctx)  # type: ignore[arg-type]

    def process_watermark(self, watermark_ms: int) -> None:
        self._fire(TimeDomain.EVENT_TIME, watermark_ms)

    def on_processing_time(self, time_ms: int) -> None:
        self._fire(TimeDomain.PROCESSING_TIME, time_ms)

    def _fire(self, domain: TimeDomain, time_ms: int) -> None:
        timers, ctx = self._timers, self._ctx
        assert timers is not None and ctx is not None
        if not timers.due(domain, time_ms):
            return
        for timer in timers.pop_due(domain, time_ms):
            emitted = len(ctx.out)
            ctx.key, ctx.timestamp_ms, ctx.time_domain = timer.key, timer.timestamp, domain.value
            try:
                self.function.on_timer(timer.timestamp, ctx)
            except Exception as exc:
                del ctx.out[emitted:]  # a failed timer emits nothing
                self.timer_failed(timer, exc)
            FAULTS.hit("during-timer-firing")


class ProcessOperator(KeyedProcessOperator):
    """Runs one instance of ``stage.function`` in a stage without a key: operator state only."""

    def initialize_state(self, context: StateInitializationContext) -> None:
        self._ctx = self._contexts(context)
        self.initialize_function(context)

    def open(self) -> None:
        assert self._ctx is not None
        self.function.open(self._ctx)

    def process_watermark(self, watermark_ms: int) -> None:
        pass  # no timers to fire

    def on_processing_time(self, time_ms: int) -> None:
        pass
