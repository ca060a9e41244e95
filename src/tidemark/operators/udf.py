"""What every operator running a user's function does with the function's own hooks (Flink's
``AbstractUdfStreamOperator``): a :class:`~tidemark.api.CheckpointedFunction` gets
``initialize_state`` (its operator state under the user's names, keyed state, whether and from
which checkpoint the task was restored, its subtask) and ``snapshot_state``; a
:class:`~tidemark.api.CheckpointListener` gets the checkpoint notifications; every function is
closed with its operator. The operators over it (:mod:`tidemark.operators.keyed_process`,
:mod:`tidemark.operators.window`) add what they do with records and time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidemark.api import CheckpointedFunction, CheckpointListener, OutputTag, Stage
from tidemark.operators.lifecycle import (
    OutputRecord,
    SideRecord,
    StateInitializationContext,
    StateSnapshotContext,
    StreamOperator,
)
from tidemark.runtime.job.operator_states import RESERVED_PREFIX
from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor, OperatorStateBackend
from tidemark.state.timers import Timer

UNKEYED = ("{what}: stage {stage!r} has no key (key_by=None), so it has no keyed state or timers; "
           "keep state in operator state (a CheckpointedFunction)")


def encoded(stage: Stage, key: Any, value: Any, timestamp_ms: int) -> OutputRecord:
    """What a function's ``ctx.emit(key, value)`` puts out: key and value as the stage encodes them."""
    return None if key is None else stage.encode_key(key), stage.encode_value(value), timestamp_ms


class EmittingContext:
    """``emit`` and ``output`` of the contexts a stage's function sees (each has ``stage``,
    ``out``, its operator's output list, and ``timestamp_ms``)."""

    __slots__ = ()
    stage: Stage
    out: list[OutputRecord]
    timestamp_ms: int

    def emit(self, key: Any, value: Any) -> None:
        self.out.append(encoded(self.stage, key, value, self.timestamp_ms))

    def output(self, tag: OutputTag | str, value: Any, key: Any = None) -> None:
        name = tag.name if isinstance(tag, OutputTag) else tag
        if name not in self.stage.side_output_topics:
            declared = sorted(self.stage.side_output_topics) or "none"
            raise ValueError(f"stage {self.stage.name!r} has no side output {name!r} (its side_outputs: {declared})")
        key_bytes, value_bytes, at = encoded(self.stage, key, value, self.timestamp_ms)
        self.out.append(SideRecord(name, key_bytes, value_bytes, at))  # type: ignore[arg-type]


def raise_error(timer: Timer, error: Exception) -> None:
    """The default of a timer that failed: the error goes on up."""
    raise error


class FunctionInitializationContext:
    """The ``FunctionInitializationContext`` a :class:`CheckpointedFunction` sees."""

    def __init__(self, context: StateInitializationContext, stage: str) -> None:
        self._context, self._stage = context, stage

    def is_restored(self) -> bool:
        return self._context.is_restored()

    @property
    def restored_checkpoint_id(self) -> int | None:
        return self._context.restored_checkpoint_id

    @property
    def subtask_index(self) -> int:
        return self._context.operator_state_store.subtask_index

    @property
    def parallelism(self) -> int:
        return self._context.operator_state_store.parallelism

    def get_list_state(self, descriptor: ListStateDescriptor) -> Any:
        return self._operator_state.get_list_state(users_descriptor(descriptor))

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> Any:
        return self._operator_state.get_union_list_state(users_descriptor(descriptor))

    def get_broadcast_state(self, descriptor: BroadcastStateDescriptor) -> Any:
        return self._operator_state.get_broadcast_state(users_descriptor(descriptor))

    def get_state(self, descriptor: Any) -> Any:
        backend = self._context.keyed_state_backend
        if backend is None:
            raise RuntimeError(UNKEYED.format(what=f"keyed state {descriptor.name!r}", stage=self._stage))
        return backend.get_state(descriptor)

    @property
    def _operator_state(self) -> OperatorStateBackend:
        return self._context.operator_state_store


def users_descriptor(descriptor: Any) -> Any:
    """``descriptor``, refused when it names operator state the runtime reserves."""
    if descriptor.name.startswith(RESERVED_PREFIX):
        raise ValueError(f"operator state {descriptor.name!r}: names starting with {RESERVED_PREFIX!r} are the "
                         f"runtime's")
    return descriptor


@dataclass(frozen=True, slots=True)
class FunctionSnapshotContext:
    """The ``FunctionSnapshotContext`` a :class:`CheckpointedFunction` sees."""

    checkpoint_id: int
    checkpoint_timestamp_ms: int


class UdfOperator(StreamOperator):
    """An operator over one user function (``self.function``; None: the operator runs none);
    subclasses call :meth:`initialize_function` from their ``initialize_state``."""

    function: Any
    stage_name: str

    def initialize_function(self, context: StateInitializationContext) -> None:
        if isinstance(self.function, CheckpointedFunction):
            self.function.initialize_state(FunctionInitializationContext(context, self.stage_name))

    def snapshot_state(self, context: StateSnapshotContext) -> None:
        if isinstance(self.function, CheckpointedFunction):
            self.function.snapshot_state(FunctionSnapshotContext(context.checkpoint_id,
                                                                 context.checkpoint_timestamp_ms))

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        if isinstance(self.function, CheckpointListener):
            self.function.notify_checkpoint_aborted(checkpoint_id)

    def close(self) -> None:
        if self.function is not None:
            self.function.close()
