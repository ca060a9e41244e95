"""The metadata view of a checkpoint or savepoint: what it records, stage by stage.

:func:`inspect_checkpoint` reads the ``_metadata`` (already in the :class:`~.source.StateSource`)
and, per stage, one header of its state files: the first old task's keyed handle (the state
definitions every task of the stage snapshots alike) and the first operator-state file. It never
reads state entries. The view holds, per stage, each old task with its key-group range, its state
handles (kind, files, sizes, shared files), changelog ranges and materialization, and the stage's
named states with their kinds, serializers and TTL, and its source positions.

``view.to_document()`` is the JSON form (``tidemark state inspect --json``); the tables are
:func:`tidemark.admin.render.checkpoint_view_text`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tidemark.protocol.messages import StateHandle, StateHandleKind, TaskSnapshot
from tidemark.state.timer_queue import is_timer_state
from tidemark.state_processor.handle_headers import read_handle_header
from tidemark.state_processor.source import StateSource

_HANDLE_KINDS = {StateHandleKind.KEYED_FULL: "keyed full", StateHandleKind.KEYED_INCREMENTAL: "incremental",
                 StateHandleKind.MATERIALIZED: "materialized", StateHandleKind.OPERATOR: "operator"}


@dataclass(frozen=True)
class FileView:
    path: str
    size_bytes: int
    shared: bool


@dataclass(frozen=True)
class HandleView:
    kind: str  # keyed full, incremental, materialized, operator
    key_group_start: int
    key_group_end: int
    state_size_bytes: int
    checkpointed_size_bytes: int
    files: tuple[FileView, ...]


@dataclass(frozen=True)
class TaskView:
    task: str
    subtask_index: int
    key_group_start: int
    key_group_end: int
    handles: tuple[HandleView, ...]
    changelog_ranges: tuple[dict[str, Any], ...]
    materialization: dict[str, int] | None
    source_offsets: tuple[dict[str, Any], ...]

    @property
    def size_bytes(self) -> int:
        return sum(h.state_size_bytes for h in self.handles)

    @property
    def written_bytes(self) -> int:
        """What this checkpoint wrote of the task's state (the rest: shared files written before)."""
        return sum(h.checkpointed_size_bytes for h in self.handles)

    @property
    def shared_files(self) -> int:
        return sum(f.shared for h in self.handles for f in h.files)


@dataclass(frozen=True)
class StateView:
    """A named state as the snapshot records it: ``kind`` VALUE, LIST, MAP, REDUCING, AGGREGATING
    for keyed state (``timers`` for a timer queue's), the mode for operator state."""

    name: str
    kind: str
    value_serializer: str
    user_key_serializer: str
    ttl_ms: int | None = None
    schema_version: int | None = None


@dataclass(frozen=True)
class StageView:
    stage: str
    backend: str  # heap, rocksdb (the writer of its keyed files), or "-" without any
    snapshot: str  # full, incremental, changelog, none (operator state only)
    tasks: tuple[TaskView, ...]
    keyed_states: tuple[StateView, ...]
    operator_states: tuple[StateView, ...]
    states_recorded_in: str  # the file whose header lists the keyed states; "changelog" if none

    @property
    def size_bytes(self) -> int:
        return sum(t.size_bytes for t in self.tasks)


@dataclass(frozen=True)
class CheckpointView:
    job: str
    checkpoint_id: int
    kind: str  # CHECKPOINT, SAVEPOINT, STOP_WITH_SAVEPOINT
    path: str
    triggered_at: int
    completed_at: int
    max_parallelism: int
    state_size_bytes: int
    checkpointed_size_bytes: int
    stages: tuple[StageView, ...]

    def to_document(self) -> dict[str, Any]:
        return asdict(self)


def _handle_view(handle: StateHandle) -> HandleView:
    return HandleView(_HANDLE_KINDS[handle.kind], handle.key_group_start, handle.key_group_end,
                      handle.state_size_bytes, handle.checkpointed_size_bytes,
                      tuple(FileView(f.path, f.size_bytes, f.shared) for f in handle.files))


def _task_view(task: TaskSnapshot) -> TaskView:
    ranges = tuple({"topic": r.topic, "partition": r.partition, "start_offset": r.start_offset,
                    "end_offset": r.end_offset} for r in task.changelog_ranges)
    materialization = None if task.materialization is None else {
        "materialization_id": task.materialization.materialization_id,
        "checkpoint_id": task.materialization.checkpoint_id}
    offsets = tuple({"topic": o.topic, "partition": o.partition, "offset": o.offset} for o in task.source_offsets)
    return TaskView(task.task_id, task.subtask_index, task.key_group_start, task.key_group_end,
                    tuple(_handle_view(h) for h in task.state_handles), ranges, materialization, offsets)


def _serializer_name(described: dict[str, Any] | None) -> str:
    return "-" if not described else str(described.get("id", "-"))


def _keyed_state(meta: dict[str, Any]) -> StateView:
    kind = "timers" if is_timer_state(meta["name"]) else meta["kind"]
    return StateView(meta["name"], kind, _serializer_name(meta.get("value_serializer")),
                     _serializer_name(meta.get("user_key_serializer")), meta.get("ttl_ms"), meta.get("schema_version"))


def _stage_view(source: StateSource, stage: str) -> StageView:
    tasks = source.tasks(stage)
    keyed = [h for t in tasks for h in t.state_handles if h.kind is not StateHandleKind.OPERATOR]
    operator = [h for t in tasks for h in t.state_handles if h.kind is StateHandleKind.OPERATOR]
    keyed_states: tuple[StateView, ...] = ()
    recorded_in = "changelog" if any(t.changelog_ranges for t in tasks) else "-"
    backend = "-"
    if keyed:
        header = read_handle_header(keyed[0], source.storage)
        keyed_states = tuple(_keyed_state(m) for m in header.states)
        recorded_in = keyed[0].files[0].path if keyed[0].files else recorded_in
        backend = header.backend or "-"
    operator_states: tuple[StateView, ...] = ()
    if operator:
        operator_states = tuple(StateView(m["name"], m["mode"], _serializer_name(m.get("value_serializer")),
                                          _serializer_name(m.get("user_key_serializer")))
                                for m in read_handle_header(operator[0], source.storage).states)
    if any(t.changelog_ranges for t in tasks):
        snapshot = "changelog"
    elif any(h.kind is StateHandleKind.KEYED_INCREMENTAL for h in keyed):
        snapshot = "incremental"
    else:
        snapshot = "full" if keyed else "none"
    return StageView(stage, backend, snapshot, tuple(_task_view(t) for t in tasks),
                     tuple(sorted(keyed_states, key=lambda s: s.name)), operator_states, recorded_in)


def inspect_checkpoint(source: StateSource) -> CheckpointView:
    """The metadata view of ``source`` (see the module docstring)."""
    m = source.metadata
    return CheckpointView(m.job_id, m.checkpoint_id, m.checkpoint_type.value, source.path, m.triggered_at,
                          m.completed_at, m.max_parallelism, m.state_size_bytes, m.checkpointed_size_bytes,
                          tuple(_stage_view(source, stage) for stage in source.stages))
