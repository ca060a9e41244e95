"""Deriving a new savepoint from a checkpoint or savepoint: stages removed or renamed, keyed
states added, replaced, removed or mapped, the max parallelism changed.

``transform_savepoint(source, [RenameStage("count_hits", "url_hits"), MapState("url_hits", "hits",
lambda url, hits: hits * 2)])`` writes a savepoint of the source's job (:mod:`.writer`) holding
everything the source holds, changed by the operations, applied in order; a stage is named as it
is at that point (after an earlier rename, by its new name):

* :class:`RemoveStage` drops a stage (its keyed and operator state, source positions and
  pre-committed output), :class:`RenameStage` gives a stage's state to a new name (a stage of the
  job is restored by its name: :mod:`tidemark.runtime.supervisor.state_claims`); the stage's
  exchange reader (``<stage>.read``) goes with it;
* :class:`SetState` writes a keyed state from rows (:class:`~.bootstrap.StateData`), replacing a
  state of that name; a stage the source does not hold is added;
* :class:`RemoveState` drops one keyed state of a stage;
* :class:`MapState` maps each value of a keyed state with ``function(key, value)`` (the value as
  the reader reads it: a map state's per map entry; ``None`` removes it);
* ``max_parallelism`` re-partitions every keyed stage's state into the key groups of the new max
  parallelism (each key goes to the key group its hash gives), ``parallelism`` sets the task count
  of the stages written again (default: each stage's own).

A stage no operation changes, whose keyed state is in canonical files (a savepoint's), has its
files copied byte for byte under its (new) name. Every other stage with keyed state is written
again, its old tasks restored as the reader restores them (:mod:`.task_restore`; a
changelog-backed task needs ``changelog``) and their entries written by the new tasks' backends
(:mod:`.task_writer`, the backend that wrote the old task, or ``backend``), snapshotted in the
canonical format: one new task at a time, from the key groups of the old tasks overlapping it,
when the key groups stay (the same max parallelism, no rows to write); else every new task at
once, each old task restored once and its entries routed by key group. Operator state files are copied, each old task's with its source positions
and pre-committed transactions to new task ``old index % parallelism`` (a restore deals them out
again by their own rules: :mod:`tidemark.checkpoint.restore_planner`). The savepoint keeps the
source's checkpoint id: the positions it holds are the source's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tidemark.api import is_stage_name
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateHandle, StateHandleKind, TaskSnapshot
from tidemark.runtime.job.physical_plan import READER_SUFFIX
from tidemark.state.snapshot import state_meta
from tidemark.state.timer_queue import is_timer_state
from tidemark.state_processor.bootstrap import Progress, StateData, check_layout, write_rows
from tidemark.state_processor.encoding import EntryEncoder, ValueFunction, key_group_of
from tidemark.state_processor.handle_headers import writer_backend
from tidemark.state_processor.reader import StateReader
from tidemark.state_processor.source import StateSource, StateSourceError, UnknownStage, UnknownState
from tidemark.state_processor.task_restore import ChangelogReaders, restored_task
from tidemark.state_processor.task_writer import StageWriter, new_assignments
from tidemark.state_processor.writer import SavepointWriter, WriteOptionError, WrittenSavepoint, default_target
from tidemark.types import OperatorId, task_id


@dataclass(frozen=True)
class RemoveStage:
    stage: str


@dataclass(frozen=True)
class RenameStage:
    stage: str
    to: str


@dataclass(frozen=True)
class SetState:
    """Write keyed state ``data.descriptor.name`` of ``stage`` from ``data.rows`` (replacing it)."""

    stage: str
    data: StateData


@dataclass(frozen=True)
class RemoveState:
    stage: str
    state: str


@dataclass(frozen=True)
class MapState:
    stage: str
    state: str
    function: ValueFunction


Operation = RemoveStage | RenameStage | SetState | RemoveState | MapState


@dataclass
class _StagePlan:
    """What becomes of one stage: the source's stage it comes from (None: a new one) and the
    changes to its keyed states."""

    source: str | None
    removed: set[str] = field(default_factory=set)  # keyed states dropped (replaced ones too)
    mapped: dict[str, list[ValueFunction]] = field(default_factory=dict)
    written: dict[str, StateData] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.mapped or self.written)


def _is_reader(stage: str) -> bool:
    return stage.endswith(READER_SUFFIX)


def _check_name(stage: str) -> None:
    if not is_stage_name(stage):
        raise StateSourceError(f"{stage!r} cannot name a stage: 1-64 letters, digits, '_' or '-'")


def plan_stages(source: StateSource, operations: Iterable[Operation]) -> dict[str, _StagePlan]:
    """The stages of the new savepoint by name; a one-line ``StateSourceError`` for a stage or
    state the operations name wrongly."""
    plans = {stage: _StagePlan(stage) for stage in source.stages}
    renamed = False  # whether an operation before renamed or removed a stage

    def existing(stage: str) -> _StagePlan:
        if stage not in plans or _is_reader(stage):
            stages = ", ".join(s for s in plans if not _is_reader(s)) or "none"
            then = " after the operations before" if renamed else ""
            raise UnknownStage(f"{source.path} has no stage {stage!r}{then}; its stages{then}: {stages}")
        return plans[stage]

    def keyed_states(plan: _StagePlan) -> list[str] | None:
        if plan.source is None:
            return sorted(plan.written)
        metas = _keyed_metas(source, plan.source)
        if metas is None:
            return None
        return sorted(({m["name"] for m in metas} - plan.removed) | set(plan.written))

    def check_state(plan: _StagePlan, stage: str, state: str) -> None:
        names = keyed_states(plan)
        if names is not None and state not in names:
            raise UnknownState(f"stage {stage!r} has no keyed state {state!r} in {source.path}; "
                               f"its states: {', '.join(names) or 'none'}")

    for op in operations:
        if isinstance(op, RemoveStage):
            existing(op.stage)
            del plans[op.stage]
            plans.pop(op.stage + READER_SUFFIX, None)
            renamed = True
        elif isinstance(op, RenameStage):
            existing(op.stage)
            _check_name(op.to)
            if op.to in plans:
                raise StateSourceError(f"cannot rename stage {op.stage!r} to {op.to!r}: that stage exists")
            plans = {(op.to if name == op.stage else name): p for name, p in plans.items()}
            reader = plans.pop(op.stage + READER_SUFFIX, None)
            if reader is not None:
                plans[op.to + READER_SUFFIX] = reader
            renamed = True
        elif isinstance(op, SetState):
            if op.stage not in plans or _is_reader(op.stage):
                _check_name(op.stage)
            plan = plans.setdefault(op.stage, _StagePlan(None))
            name = op.data.descriptor.name
            if is_timer_state(name):
                raise StateSourceError(f"{name!r} is a timer queue's state name, not a keyed state's")
            plan.removed.add(name)
            plan.mapped.pop(name, None)
            plan.written[name] = op.data
        elif isinstance(op, RemoveState):
            plan = existing(op.stage)
            check_state(plan, op.stage, op.state)
            plan.removed.add(op.state)
            plan.mapped.pop(op.state, None)
            plan.written.pop(op.state, None)
        elif isinstance(op, MapState):
            plan = existing(op.stage)
            check_state(plan, op.stage, op.state)
            if op.state in plan.written:
                raise StateSourceError(f"state {op.state!r} of stage {op.stage!r} is written by this transform: "
                                       "map its rows instead")
            plan.mapped.setdefault(op.state, []).append(op.function)
        else:
            raise TypeError(f"not a transform operation: {op!r}")
    return plans


def _keyed_metas(source: StateSource, stage: str) -> list[dict[str, Any]] | None:
    """The keyed state definitions (timers left out) of ``stage``'s first task with state files."""
    return StateReader(source).state_metas(stage)


def _canonical_only(tasks: Sequence[TaskSnapshot]) -> bool:
    return all(not t.changelog_ranges and t.materialization is None
               and all(h.kind in (StateHandleKind.KEYED_FULL, StateHandleKind.OPERATOR) for h in t.state_handles)
               for t in tasks)


def _has_keyed_state(tasks: Sequence[TaskSnapshot]) -> bool:
    return any(t.changelog_ranges or t.materialization is not None
               or any(h.kind is not StateHandleKind.OPERATOR for h in t.state_handles) for t in tasks)


def transform_savepoint(source: StateSource, operations: Sequence[Operation], *, target: str | None = None,
                        max_parallelism: int | None = None, parallelism: int | None = None,
                        backend: str | None = None, changelog: ChangelogReaders | None = None,
                        progress: Progress | None = None) -> WrittenSavepoint:
    """The savepoint ``operations`` derive from ``source`` (see the module docstring), in
    ``target`` (default ``<job>/savepoints/transform-<id>-<ms>``)."""
    metadata = source.metadata
    new_max = metadata.max_parallelism if max_parallelism is None else max_parallelism
    check_layout(parallelism or 1, new_max, backend or "heap")
    plans = plan_stages(source, operations)
    job, cid = metadata.job_id, metadata.checkpoint_id
    written_at = int(time.time() * 1000)
    with SavepointWriter(source.storage, job, target or default_target(job, "transform", cid), checkpoint_id=cid,
                         max_parallelism=new_max) as savepoint:
        for name, plan in plans.items():
            old = source.tasks(plan.source) if plan.source is not None else []
            count = parallelism or (len(old) if old else 1)
            if count > new_max:
                raise WriteOptionError(f"stage {name!r} has {count} tasks, more than the max parallelism {new_max}")
            if (not plan.changed and new_max == metadata.max_parallelism and count == len(old)
                    and _canonical_only(old)):
                savepoint.add(_copied(savepoint, old, name))
                if progress is not None:
                    progress(f"stage {name}: {len(old)} tasks copied")
                continue
            savepoint.add(_rewritten(source, savepoint, plan, old, name, count, new_max, backend, changelog,
                                     written_at, progress))
        return savepoint.commit()


def _copied_handle(savepoint: SavepointWriter, handle: StateHandle, stage: str) -> StateHandle:
    files = tuple(savepoint.copy(ref, stage) for ref in handle.files)
    return replace(handle, operator_id=OperatorId(stage), files=files,
                   checkpointed_size_bytes=sum(f.size_bytes for f in files))


def _copied(savepoint: SavepointWriter, old: Sequence[TaskSnapshot], stage: str) -> list[TaskSnapshot]:
    """``old``'s tasks under ``stage``, their files copied into the savepoint."""
    return [replace(t, task_id=task_id(stage, t.subtask_index), operator_id=OperatorId(stage),
                    state_handles=tuple(_copied_handle(savepoint, h, stage) for h in t.state_handles))
            for t in old]


def _rewritten(source: StateSource, savepoint: SavepointWriter, plan: _StagePlan, old: Sequence[TaskSnapshot],
               stage: str, count: int, new_max: int, backend: str | None, changelog: ChangelogReaders | None,
               written_at: int, progress: Progress | None) -> list[TaskSnapshot]:
    """The stage's tasks at ``count`` under ``new_max``: keyed state written again (when it has
    any), operator state, positions and transactions carried to ``old index % count``."""
    started = time.monotonic()
    keyed = bool(plan.written) or _has_keyed_state(old)
    chosen = backend or (writer_backend(tuple(h for t in old for h in t.state_handles), source.storage)
                         if old else "heap")
    new_metas = [state_meta(data.descriptor) for data in plan.written.values()]
    rescaled = new_max != source.metadata.max_parallelism
    carried: dict[int, dict[str, list[Any]]] = {i: {"operator": [], "offsets": [], "sinks": []} for i in range(count)}
    for t in old:
        share = carried[t.subtask_index % count]
        share["operator"] += [_copied_handle(savepoint, h, stage) for h in t.state_handles
                              if h.kind is StateHandleKind.OPERATOR]
        share["offsets"] += list(t.source_offsets)
        share["sinks"] += list(t.sink_transactions)
    if not keyed:
        return [TaskSnapshot(a.task_id, a.operator_id, a.subtask_index, a.key_group_start, a.key_group_end,
                             state_handles=tuple(carried[a.subtask_index]["operator"]),
                             source_offsets=tuple(carried[a.subtask_index]["offsets"]),
                             sink_transactions=tuple(carried[a.subtask_index]["sinks"]))
                for a in new_assignments(stage, count, new_max)]
    if not rescaled and not plan.written:
        return _written_task_by_task(source, savepoint, plan, old, stage, count, chosen, changelog, written_at,
                                     carried, progress)
    with StageWriter(stage, count, new_max, chosen, new_metas) as writer:
        for done, task in enumerate(old, 1):
            _feed(writer, source, task, plan, None, new_max if rescaled else None, changelog, written_at)
            if progress is not None:
                progress(f"stage {stage}: {done}/{len(old)} old tasks read, {writer.entries} entries, "
                         f"{time.monotonic() - started:.1f}s")
        write_rows(writer, list(plan.written.values()), written_at_ms=written_at, progress=progress)
        tasks = [_finished(writer, index, savepoint, carried) for index in sorted(writer.tasks)]
        if progress is not None:
            progress(f"stage {stage}: {count} tasks written, {writer.entries} entries, "
                     f"{time.monotonic() - started:.1f}s")
        return tasks


def _written_task_by_task(source: StateSource, savepoint: SavepointWriter, plan: _StagePlan,
                          old: Sequence[TaskSnapshot], stage: str, count: int, backend: str,
                          changelog: ChangelogReaders | None, written_at: int,
                          carried: dict[int, dict[str, list[Any]]], progress: Progress | None) -> list[TaskSnapshot]:
    """The keyed state of a stage whose key groups stay (the same max parallelism, no rows to
    write) written one new task at a time, each from the key groups of the old tasks overlapping
    it: no more than one new task and one old task's part of it are held at once."""
    started = time.monotonic()
    max_parallelism = source.metadata.max_parallelism
    tasks, entries = [], 0
    for a in new_assignments(stage, count, max_parallelism):
        mine = KeyGroupRange(a.key_group_start, a.key_group_end)
        with StageWriter(stage, count, max_parallelism, backend, [], subtasks=[a.subtask_index]) as writer:
            for task in old:
                theirs = KeyGroupRange(task.key_group_start, task.key_group_end).intersection(mine)
                if len(theirs):
                    _feed(writer, source, task, plan, theirs, None, changelog, written_at)
            tasks.append(_finished(writer, a.subtask_index, savepoint, carried))
            entries += writer.entries
        if progress is not None:
            progress(f"stage {stage}: {a.subtask_index + 1}/{count} tasks written, {entries} entries, "
                     f"{time.monotonic() - started:.1f}s")
    return tasks


def _feed(writer: StageWriter, source: StateSource, task: TaskSnapshot, plan: _StagePlan,
          key_groups: KeyGroupRange | None, regroup_to: int | None, changelog: ChangelogReaders | None,
          written_at: int) -> None:
    """The entries of old ``task`` (of ``key_groups`` only, when given), restored as the reader
    restores them, into ``writer``: removed states left out, mapped ones mapped, each entry in the
    key group of max parallelism ``regroup_to`` when given."""
    with restored_task(source.metadata, task, source.storage, key_groups=key_groups, changelog=changelog) as snapshot:
        metas = [m for m in snapshot.states if m["name"] not in plan.removed]
        writer.define(metas, f"the state of {task.task_id}")
        encoders = {m["name"]: EntryEncoder(m, written_at) for m in metas if m["name"] in plan.mapped}
        for entry in snapshot.entries():
            name = entry.state_name
            if name in plan.removed:
                continue
            if regroup_to is not None:
                entry = replace(entry, key_group=key_group_of(entry.key, regroup_to))
            if name in encoders:
                for function in plan.mapped[name]:
                    entry = encoders[name].remap(entry, function)  # type: ignore[assignment]
                    if entry is None:
                        break
                if entry is None:
                    continue
            writer.add(entry)


def _finished(writer: StageWriter, index: int, savepoint: SavepointWriter,
              carried: dict[int, dict[str, list[Any]]]) -> TaskSnapshot:
    share = carried[index]
    return writer.tasks[index].finish(savepoint.checkpoint_id, savepoint.files, operator_handles=share["operator"],
                                      source_offsets=share["offsets"], sink_transactions=share["sinks"])
