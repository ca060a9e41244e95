"""One parallel task of a stage: a key-group range, its keyed state and the user function.

Lifecycle: ``StageTask(...)`` -> ``restore(...)`` at most once -> ``open()`` -> ``process(...)``
per record routed here -> ``snapshot(...)`` at each checkpoint -> ``close()``. A task never
sees a key outside its key groups (the router guarantees it; the backend checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tidemark.changelog import ChangelogReader, ChangelogSource, ChangelogStateBackend
from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationEvent,
    MaterializationRef,
    StateHandle,
    TaskAssignment,
)
from tidemark.runtime.api import KeyedProcessFunction, Stage, StateBackendKind
from tidemark.runtime.outputs import OutputRecord
from tidemark.state import HashMapStateBackend, KeyedStateBackend, ListStateDescriptor, OperatorStateBackend
from tidemark.keygroups import KeyGroupRange
from tidemark.state.rocksdb.backend import RocksDBStateBackend
from tidemark.state.ttl import Clock
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, TaskId

SINK_STATE = ListStateDescriptor("tidemark_sink_pending")
"""Union list state: the write-ahead buffers of the task's output (see runtime.outputs)."""
CUT_STATE = ListStateDescriptor("tidemark_channel_cut")
"""Union list state: where the stage's channel input was cut (see runtime.alignment)."""


@dataclass(frozen=True)
class KeyedSnapshot:
    """A task's keyed part of a checkpoint: state files, or (changelog mode) the materialized
    snapshot plus the changelog ranges applied on top."""

    handles: tuple[StateHandle, ...]
    ranges: tuple[ChangelogRange, ...] = ()
    materialization: MaterializationRef | None = None


@dataclass
class _Context:
    """The ``StateContext`` and ``ProcessContext`` a function sees."""

    backend: KeyedStateBackend | ChangelogStateBackend
    out: list[OutputRecord] = field(default_factory=list)
    stage: Stage | None = None
    key: Any = None
    timestamp_ms: int = 0

    def get_state(self, descriptor: Any) -> Any:
        return self.backend.get_state(descriptor)

    def emit(self, key: Any, value: Any) -> None:
        assert self.stage is not None
        self.out.append((None if key is None else self.stage.encode_key(key), self.stage.encode_value(value)))


def create_backend(kind: StateBackendKind, key_groups: KeyGroupRange, max_parallelism: int,
                   operator_id: str, local_dir: Path, clock: Clock | None = None) -> KeyedStateBackend:
    """``clock``: processing time for TTL (default the wall clock; tests pass a ManualClock)."""
    if kind is StateBackendKind.ROCKSDB:
        return RocksDBStateBackend(local_dir, key_groups, max_parallelism, operator_id=operator_id, clock=clock)
    return HashMapStateBackend(key_groups, max_parallelism, operator_id=operator_id, clock=clock)


def _state_snapshot(backend: KeyedStateBackend, checkpoint_id: CheckpointId, storage: CheckpointStorage,
                    canonical: bool) -> tuple[StateHandle, ...]:
    """RocksDB: incremental native files, or canonical for savepoints; heap: always canonical."""
    if isinstance(backend, RocksDBStateBackend):
        return tuple(backend.snapshot(checkpoint_id, storage, canonical=canonical))
    return tuple(backend.snapshot(checkpoint_id, storage))


class StageTask:
    def __init__(self, stage: Stage, assignment: TaskAssignment, parallelism: int,
                 backend: KeyedStateBackend | ChangelogStateBackend) -> None:
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

    @property
    def changelog(self) -> ChangelogStateBackend | None:
        return self.backend if isinstance(self.backend, ChangelogStateBackend) else None

    def restore(self, keyed: Sequence[StateHandle], operator: Sequence[StateHandle],
                storage: CheckpointStorage) -> None:
        if keyed:
            assert not isinstance(self.backend, ChangelogStateBackend)
            self.backend.restore(keyed, storage)
        if operator:
            self.operator_state.restore(operator, storage)

    def restore_changelog(self, sources: Sequence[ChangelogSource], operator: Sequence[StateHandle],
                          storage: CheckpointStorage, reader: ChangelogReader,
                          rebase_to: CheckpointStorage) -> bool:
        """Changelog mode: materialized snapshots, then exactly the recorded changelog ranges;
        True when the restored state had to be written again as a base of this task's own
        (see :meth:`ChangelogStateBackend.restore`)."""
        assert isinstance(self.backend, ChangelogStateBackend)
        self.backend.restore(sources, storage, reader, rebase_to=rebase_to)
        if operator:
            self.operator_state.restore(operator, storage)
        return self.backend.rebased

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

        In changelog mode a checkpoint persists pending changes and runs no state snapshot; a
        savepoint (``canonical``) is a full snapshot of the wrapped backend, self-contained."""
        for descriptor, items in operator_items.items():
            self.operator_state.get_union_list_state(descriptor).update(items)
        backend = self.backend
        if isinstance(backend, ChangelogStateBackend) and not canonical:
            part = backend.snapshot(checkpoint_id)
            keyed = KeyedSnapshot(part.handles, part.ranges, part.materialization)
        else:
            inner = backend.backend if isinstance(backend, ChangelogStateBackend) else backend
            keyed = KeyedSnapshot(_state_snapshot(inner, checkpoint_id, storage, canonical))
        return keyed, tuple(self.operator_state.snapshot(checkpoint_id, storage))

    def notify_completed(self, checkpoint_id: CheckpointId) -> None:
        if self.changelog is not None:
            self.changelog.notify_checkpoint_complete(checkpoint_id)

    def notify_aborted(self, checkpoint_id: CheckpointId) -> None:
        if self.changelog is not None:
            self.changelog.notify_checkpoint_aborted(checkpoint_id)

    def on_materialization(self, event: MaterializationEvent) -> None:
        if self.changelog is not None:
            self.changelog.on_materialization_event(event)

    def close(self) -> None:
        try:
            self.function.close()
        finally:
            self.backend.close()
            self.operator_state.close()
