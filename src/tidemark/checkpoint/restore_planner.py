"""Planning a restore: which state each new subtask reads (Flink: StateAssignmentOperation).

Given a completed checkpoint's metadata and a new parallelism, every operator of the checkpoint
gets ``parallelism`` subtasks whose key-group ranges follow Flink's formula, and:

* keyed handles (full, incremental, materialized) go to every new subtask whose range
  intersects the handle's range; the subtask ignores key groups outside its own range;
* changelog ranges and materialization refs follow the old task they belong to, by the same
  intersection rule (state changes carry their key group, so a reader filters);
* operator state is redistributed by its :class:`OperatorStateMode`: ``SPLIT_DISTRIBUTE`` handles
  round-robin, ``UNION`` handles to everyone, ``BROADCAST`` one copy to everyone;
* source offsets (split state) are dealt round-robin in (topic, partition) order, sink
  transactions by old subtask index modulo the new parallelism.

Everything is ordered deterministically, so two planners give byte-identical plans.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TypeVar

from tidemark.checkpoint.operator_state_mode import OperatorStateMode, operator_state_mode
from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointMetadata,
    MaterializationRef,
    SinkTransaction,
    SourceOffset,
    StateHandle,
    StateHandleKind,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.keygroups import compute_key_group_range
from tidemark.types import CheckpointId, JobId, KeyGroup, OperatorId, TaskId, task_id

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class SubtaskRestore:
    """Everything one new subtask restores."""

    assignment: TaskAssignment
    keyed_handles: tuple[StateHandle, ...] = ()
    operator_handles: tuple[StateHandle, ...] = ()
    source_offsets: tuple[SourceOffset, ...] = ()
    changelog_ranges: tuple[ChangelogRange, ...] = ()
    materializations: tuple[MaterializationRef, ...] = ()
    sink_transactions: tuple[SinkTransaction, ...] = ()
    restored_from: tuple[TaskId, ...] = ()  # old tasks whose keyed state overlaps this one


@dataclass(frozen=True, slots=True)
class RestorePlan:
    """The restore of one checkpoint at one parallelism."""

    job_id: JobId
    checkpoint_id: CheckpointId
    max_parallelism: int
    parallelism: int
    subtasks: tuple[SubtaskRestore, ...]

    @property
    def assignments(self) -> tuple[TaskAssignment, ...]:
        return tuple(s.assignment for s in self.subtasks)

    def for_task(self, task: TaskId) -> SubtaskRestore:
        for subtask in self.subtasks:
            if subtask.assignment.task_id == task:
                return subtask
        raise KeyError(f"task {task} is not part of this restore plan")


def plan_assignments(
    operators: tuple[OperatorId, ...], parallelism: int, max_parallelism: int
) -> tuple[TaskAssignment, ...]:
    """Key-group assignments of ``parallelism`` subtasks for each operator, in operator order."""
    out = []
    for op in operators:
        for index in range(parallelism):
            key_groups = compute_key_group_range(max_parallelism, parallelism, index)
            out.append(TaskAssignment(task_id(op, index), op, index,
                                      KeyGroup(key_groups.start), KeyGroup(key_groups.end)))
    return tuple(out)


def plan_restore(metadata: CheckpointMetadata, parallelism: int) -> RestorePlan:
    """Which handles, offsets and ranges each new subtask restores from ``metadata``."""
    by_operator: dict[OperatorId, list[TaskSnapshot]] = defaultdict(list)
    for snapshot in metadata.tasks:
        by_operator[snapshot.operator_id].append(snapshot)
    operators = tuple(sorted(by_operator))
    subtasks: list[SubtaskRestore] = []
    for op in operators:
        old = sorted(by_operator[op], key=lambda s: s.subtask_index)
        new = plan_assignments((op,), parallelism, metadata.max_parallelism)
        subtasks.extend(_plan_operator(old, new))
    return RestorePlan(
        job_id=metadata.job_id,
        checkpoint_id=metadata.checkpoint_id,
        max_parallelism=metadata.max_parallelism,
        parallelism=parallelism,
        subtasks=tuple(subtasks),
    )


def _plan_operator(
    old: list[TaskSnapshot], new: tuple[TaskAssignment, ...]
) -> list[SubtaskRestore]:
    operator_parts = _distribute_operator_state(old, len(new))
    offsets = _deal_round_robin(
        sorted((o for s in old for o in s.source_offsets), key=lambda o: (o.topic, o.partition)),
        len(new),
    )
    plans = []
    for a in new:
        overlapping = [s for s in old if _intersects(s.key_group_start, s.key_group_end, a)]
        keyed = tuple(
            h for s in old for h in s.state_handles
            if h.kind is not StateHandleKind.OPERATOR
            and _intersects(h.key_group_start, h.key_group_end, a)
        )
        plans.append(
            SubtaskRestore(
                assignment=a,
                keyed_handles=keyed,
                operator_handles=operator_parts[a.subtask_index],
                source_offsets=offsets[a.subtask_index],
                changelog_ranges=tuple(r for s in overlapping for r in s.changelog_ranges),
                materializations=tuple(
                    s.materialization for s in overlapping if s.materialization is not None
                ),
                sink_transactions=tuple(
                    t for s in old if s.subtask_index % len(new) == a.subtask_index
                    for t in s.sink_transactions
                ),
                restored_from=tuple(s.task_id for s in overlapping if _has_keyed_state(s)),
            )
        )
    return plans


def _distribute_operator_state(
    old: list[TaskSnapshot], parallelism: int
) -> list[tuple[StateHandle, ...]]:
    split: list[StateHandle] = []
    union: list[StateHandle] = []
    broadcast: list[StateHandle] = []
    broadcast_from: int | None = None
    for snapshot in old:
        for handle in snapshot.state_handles:
            if handle.kind is not StateHandleKind.OPERATOR:
                continue
            mode = operator_state_mode(handle)
            if mode is OperatorStateMode.SPLIT_DISTRIBUTE:
                split.append(handle)
            elif mode is OperatorStateMode.UNION:
                union.append(handle)
            elif broadcast_from in (None, snapshot.subtask_index):
                broadcast_from = snapshot.subtask_index
                broadcast.append(handle)
    dealt = _deal_round_robin(split, parallelism)
    return [dealt[i] + tuple(union) + tuple(broadcast) for i in range(parallelism)]


def _deal_round_robin(items: list[_T], parallelism: int) -> list[tuple[_T, ...]]:
    return [tuple(items[i::parallelism]) for i in range(parallelism)]


def _intersects(start: int, end: int, a: TaskAssignment) -> bool:
    return start >= 0 and end >= start and start <= a.key_group_end and end >= a.key_group_start


def _has_keyed_state(snapshot: TaskSnapshot) -> bool:
    return bool(snapshot.changelog_ranges) or any(
        h.kind is not StateHandleKind.OPERATOR for h in snapshot.state_handles
    )
