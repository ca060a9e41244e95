"""One parallel task of a stage: a key-group range, its keyed state and the user function.

Lifecycle: ``StageTask(...)`` -> ``restore(...)`` at most once -> ``open()`` (the function's
``initialize_state`` when it is a ``CheckpointedFunction``, then its ``open``) -> ``process(...)``
per record routed here, ``fire(domain, time)`` whenever the stage's watermark or the wall clock
moves -> ``snapshot(...)`` at each checkpoint (the function's ``snapshot_state`` first) ->
``notify_completed`` / ``notify_aborted`` as checkpoints end (the function's, when it is a
``CheckpointListener``) -> ``close()``. A task never sees a key outside its
key groups (the router guarantees it; the backend checks it).

Timers (:class:`~tidemark.runtime.api.TimerService`) are the task's keyed state
(:class:`tidemark.state.timers.InternalTimerService`): ``fire`` pops each due one with its key current
and calls the function's ``on_timer``; what it emits goes to the same output as what ``process``
emits. The stage's watermark and clock come from :class:`StageTime`, shared by the worker's tasks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import MaterializationEvent, StateHandle, TaskAssignment
from tidemark.clock import now_ms
from tidemark.runtime.api import NO_WATERMARK, CheckpointedFunction, CheckpointListener, KeyedProcessFunction, Stage
from tidemark.runtime.faults import FAULTS
from tidemark.runtime.outputs import OutputRecord
from tidemark.state import (
    BroadcastStateDescriptor,
    KeyedSnapshot,
    KeyedStateBackend,
    ListStateDescriptor,
    OperatorStateBackend,
)
from tidemark.state.timers import InternalTimerService, TimeDomain, Timer
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, TaskId

SINK_STATE = ListStateDescriptor("tidemark_sink_pending")
"""Union list state: the write-ahead buffers of the task's output (see runtime.outputs)."""
CUT_STATE = ListStateDescriptor("tidemark_channel_cut")
"""Union list state: where the stage's channel input was cut (see runtime.alignment)."""
WATERMARK_STATE = ListStateDescriptor("tidemark_watermarks")
"""Union list state: the worker's watermarks at the checkpoint (see runtime.watermarks)."""


@dataclass
class StageTime:
    """The clocks a worker's tasks share: the stage's watermark (the worker moves it) and the
    wall clock; and the timers registered and fired since the worker last counted them."""

    watermark: int = NO_WATERMARK
    clock: Callable[[], int] = now_ms
    registered: Counter[TimeDomain] = field(default_factory=Counter)
    fired: Counter[TimeDomain] = field(default_factory=Counter)


class _Timers:
    """The ``TimerService`` a function sees: its task's timers of the current key."""

    __slots__ = ("_service", "_time")

    def __init__(self, service: InternalTimerService, time: StageTime) -> None:
        self._service = service
        self._time = time

    def _register(self, domain: TimeDomain, timestamp_ms: int) -> None:
        before = self._service.count(domain)
        self._service.register(domain, timestamp_ms)
        self._time.registered[domain] += self._service.count(domain) - before

    def register_event_time_timer(self, timestamp_ms: int) -> None:
        self._register(TimeDomain.EVENT_TIME, timestamp_ms)

    def register_processing_time_timer(self, timestamp_ms: int) -> None:
        self._register(TimeDomain.PROCESSING_TIME, timestamp_ms)

    def delete_event_time_timer(self, timestamp_ms: int) -> None:
        self._service.delete(TimeDomain.EVENT_TIME, timestamp_ms)

    def delete_processing_time_timer(self, timestamp_ms: int) -> None:
        self._service.delete(TimeDomain.PROCESSING_TIME, timestamp_ms)

    def current_watermark(self) -> int:
        return self._time.watermark

    def current_processing_time(self) -> int:
        return self._time.clock()


@dataclass
class _Context:
    """The ``StateContext``, ``ProcessContext`` and ``OnTimerContext`` a function sees."""

    backend: KeyedStateBackend
    out: list[OutputRecord] = field(default_factory=list)
    stage: Stage | None = None
    key: Any = None
    timestamp_ms: int = 0
    time_domain: str | None = None  # in on_timer only
    timers: _Timers | None = None

    def get_state(self, descriptor: Any) -> Any:
        return self.backend.get_state(descriptor)

    def emit(self, key: Any, value: Any) -> None:
        assert self.stage is not None
        self.out.append((None if key is None else self.stage.encode_key(key), self.stage.encode_value(value),
                         self.timestamp_ms))

    def timer_service(self) -> _Timers:
        if self.timers is None:
            raise RuntimeError("timers are there in process and on_timer, not in open")
        return self.timers


RESERVED_PREFIX = "tidemark_"
"""Operator state names of the runtime's own (above); a function's may not start with it."""


class _InitializationContext:
    """The ``FunctionInitializationContext`` a :class:`CheckpointedFunction` sees."""

    def __init__(self, backend: KeyedStateBackend, operator_state: OperatorStateBackend,
                 restored_checkpoint_id: CheckpointId | None) -> None:
        self._backend, self._operator_state = backend, operator_state
        self._restored = restored_checkpoint_id

    def is_restored(self) -> bool:
        return self._restored is not None

    @property
    def restored_checkpoint_id(self) -> int | None:
        return self._restored

    def get_list_state(self, descriptor: ListStateDescriptor) -> Any:
        return self._operator_state.get_list_state(_users(descriptor))

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> Any:
        return self._operator_state.get_union_list_state(_users(descriptor))

    def get_broadcast_state(self, descriptor: BroadcastStateDescriptor) -> Any:
        return self._operator_state.get_broadcast_state(_users(descriptor))

    def get_state(self, descriptor: Any) -> Any:
        return self._backend.get_state(descriptor)


def _users(descriptor: Any) -> Any:
    if descriptor.name.startswith(RESERVED_PREFIX):
        raise ValueError(f"operator state {descriptor.name!r}: names starting with {RESERVED_PREFIX!r} are the "
                         f"runtime's")
    return descriptor


@dataclass(frozen=True, slots=True)
class _SnapshotContext:
    """The ``FunctionSnapshotContext`` a :class:`CheckpointedFunction` sees."""

    checkpoint_id: int
    checkpoint_timestamp_ms: int


class StageTask:
    def __init__(self, stage: Stage, assignment: TaskAssignment, parallelism: int,
                 backend: KeyedStateBackend, time: StageTime | None = None) -> None:
        self.stage = stage
        self.assignment = assignment
        self.task_id: TaskId = assignment.task_id
        self.backend = backend
        self.operator_state = OperatorStateBackend(operator_id=stage.name, subtask_index=assignment.subtask_index,
                                                   parallelism=parallelism)
        self.function: KeyedProcessFunction = stage.function()
        self._ctx = _Context(backend, stage=stage)
        self.time = time or StageTime()
        self.timers: InternalTimerService | None = None  # from open(): after the restore
        self.records_in = 0  # records processed since the worker last counted them
        self.restored_checkpoint_id: CheckpointId | None = None  # restore(): where the state came from

    @property
    def key_groups(self) -> KeyGroupRange:
        return self.backend.key_group_range

    def restore(self, keyed: Sequence[KeyedSnapshot], operator: Sequence[StateHandle],
                storage: CheckpointStorage, checkpoint_id: CheckpointId) -> None:
        """Keyed state from the old tasks' keyed snapshots overlapping this task's key groups
        (the backend keeps only its own), then operator state from ``operator``, all of checkpoint
        (or savepoint) ``checkpoint_id``."""
        self.restored_checkpoint_id = checkpoint_id
        if keyed:
            self.backend.restore(keyed, storage)
        if operator:
            self.operator_state.restore(operator, storage)

    def restored_items(self, descriptor: ListStateDescriptor) -> list[bytes]:
        return list(self.operator_state.get_union_list_state(descriptor).get())

    def open(self) -> None:
        """``initialize_state`` (a :class:`CheckpointedFunction`), then ``open``."""
        self.timers = InternalTimerService(self.backend)
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(
                _InitializationContext(self.backend, self.operator_state, self.restored_checkpoint_id))
        self.function.open(self._ctx)
        self._ctx.timers = _Timers(self.timers, self.time)

    def process(self, key: Any, value: Any, timestamp_ms: int) -> list[OutputRecord]:
        ctx = self._ctx
        self.backend.set_current_key(key)
        ctx.key, ctx.timestamp_ms, ctx.time_domain, ctx.out = key, timestamp_ms, None, []
        self.function.process(value, ctx)
        self.records_in += 1
        return ctx.out

    def due(self, domain: TimeDomain, time: int) -> bool:
        """True when a timer of ``domain`` is due at ``time``."""
        assert self.timers is not None
        upcoming = self.timers.next_timestamp(domain)
        return upcoming is not None and upcoming <= time

    def fire(self, domain: TimeDomain, time: int,
             failed: Callable[[Timer, Exception], None]) -> list[OutputRecord]:
        """Call ``on_timer`` for every timer of ``domain`` due at ``time``, in time order, each
        with its key current and already removed from state; returns what they emitted. A timer
        whose ``on_timer`` raises goes to ``failed`` (the stage's error policy) and emits nothing."""
        assert self.timers is not None
        ctx = self._ctx
        out: list[OutputRecord] = []
        for timer in self.timers.pop_due(domain, time):
            ctx.key, ctx.timestamp_ms, ctx.time_domain, ctx.out = timer.key, timer.timestamp, domain.value, []
            try:
                self.function.on_timer(timer.timestamp, ctx)
            except Exception as exc:
                failed(timer, exc)
            else:
                out.extend(ctx.out)
            self.time.fired[domain] += 1
            FAULTS.hit("during-timer-firing")
        return out

    def pending_timers(self, domain: TimeDomain) -> int:
        return self.timers.count(domain) if self.timers is not None else 0

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *, canonical: bool,
                 operator_items: dict[ListStateDescriptor, list[bytes]]
                 ) -> tuple[KeyedSnapshot, tuple[StateHandle, ...]]:
        """The function's ``snapshot_state`` (a :class:`CheckpointedFunction`), then keyed state,
        then operator state holding ``operator_items`` (union list states) and the function's.
        ``canonical`` (savepoints): a self-contained full snapshot in the canonical format."""
        if isinstance(self.function, CheckpointedFunction):
            self.function.snapshot_state(_SnapshotContext(int(checkpoint_id), now_ms()))
        for descriptor, items in operator_items.items():
            self.operator_state.get_union_list_state(descriptor).update(items)
        keyed = self.backend.snapshot(checkpoint_id, storage, canonical=canonical)
        return keyed, tuple(self.operator_state.snapshot(checkpoint_id, storage))

    def notify_completed(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_complete(checkpoint_id)
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_complete(int(checkpoint_id))

    def notify_aborted(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_aborted(checkpoint_id)
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_aborted(int(checkpoint_id))

    def on_materialization(self, event: MaterializationEvent) -> None:
        self.backend.notify_materialization(event)

    def close(self) -> None:
        try:
            self.function.close()
        finally:
            self.backend.close()
            self.operator_state.close()
