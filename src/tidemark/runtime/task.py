"""One parallel task of a stage: a key-group range, its keyed state and the user function.

Lifecycle: ``StageTask(...)`` -> ``restore(...)`` at most once -> ``open()`` -> ``process(...)``
per record routed here -> ``snapshot(...)`` at each checkpoint -> ``close()``. A task never
sees a key outside its key groups (the router guarantees it; the backend checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import MaterializationEvent, StateHandle, TaskAssignment
from tidemark.runtime.api import KeyedProcessFunction, Stage
from tidemark.runtime.outputs import OutputRecord
from tidemark.state import KeyedSnapshot, KeyedStateBackend, ListStateDescriptor, OperatorStateBackend
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, TaskId

SINK_STATE = ListStateDescriptor("tidemark_sink_pending")
"""Union list state: the write-ahead buffers of the task's output (see runtime.outputs)."""
CUT_STATE = ListStateDescriptor("tidemark_channel_cut")
"""Union list state: where the stage's channel input was cut (see runtime.alignment)."""


@dataclass
class _Context:
    """The ``StateContext`` and ``ProcessContext`` a function sees."""

    backend: KeyedStateBackend
    out: list[OutputRecord] = field(default_factory=list)
    stage: Stage | None = None
    key: Any = None
    timestamp_ms: int = 0

    def get_state(self, descriptor: Any) -> Any:
        return self.backend.get_state(descriptor)

    def emit(self, key: Any, value: Any) -> None:
        assert self.stage is not None
        self.out.append((None if key is None else self.stage.encode_key(key), self.stage.encode_value(value)))


class StageTask:
    def __init__(self, stage: Stage, assignment: TaskAssignment, parallelism: int,
                 backend: KeyedStateBackend) -> None:
        self.stage = stage
        self.assignment = assignment
        self.task_id: TaskId = assignment.task_id
        self.backend = backend
        self.operator_state = OperatorStateBackend(operator_id=stage.name, subtask_index=assignment.subtask_index,
                                                   parallelism=parallelism)
        self.function: KeyedProcessFunction = stage.function()
        self._ctx = _Context(backend, stage=stage)
        self.records_in = 0  # records processed since the worker last counted them

    @property
    def key_groups(self) -> KeyGroupRange:
        return self.backend.key_group_range

    def restore(self, keyed: Sequence[KeyedSnapshot], operator: Sequence[StateHandle],
                storage: CheckpointStorage) -> None:
        """Keyed state from the old tasks' keyed snapshots overlapping this task's key groups
        (the backend keeps only its own), then operator state from ``operator``."""
        if keyed:
            self.backend.restore(keyed, storage)
        if operator:
            self.operator_state.restore(operator, storage)

    def restored_items(self, descriptor: ListStateDescriptor) -> list[bytes]:
        return list(self.operator_state.get_union_list_state(descriptor).get())

    def open(self) -> None:
        self.function.open(self._ctx)

    def process(self, key: Any, value: Any, timestamp_ms: int) -> list[OutputRecord]:
        ctx = self._ctx
        self.backend.set_current_key(key)
        ctx.key, ctx.timestamp_ms, ctx.out = key, timestamp_ms, []
        self.function.process(value, ctx)
        self.records_in += 1
        return ctx.out

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *, canonical: bool,
                 operator_items: dict[ListStateDescriptor, list[bytes]]
                 ) -> tuple[KeyedSnapshot, tuple[StateHandle, ...]]:
        """Keyed state, then operator state holding ``operator_items`` (union list states).
        ``canonical`` (savepoints): a self-contained full snapshot in the canonical format."""
        for descriptor, items in operator_items.items():
            self.operator_state.get_union_list_state(descriptor).update(items)
        keyed = self.backend.snapshot(checkpoint_id, storage, canonical=canonical)
        return keyed, tuple(self.operator_state.snapshot(checkpoint_id, storage))

    def notify_completed(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_complete(checkpoint_id)

    def notify_aborted(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_aborted(checkpoint_id)

    def on_materialization(self, event: MaterializationEvent) -> None:
        self.backend.notify_materialization(event)

    def close(self) -> None:
        try:
            self.function.close()
        finally:
            self.backend.close()
            self.operator_state.close()
