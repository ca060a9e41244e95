"""Restoring a stage's tasks from a checkpoint or savepoint.

``restore_stage(...)`` reads nothing but the given ``_metadata`` and the files and changelog
ranges it names. Every worker plans its own tasks with the same pure planner
(:func:`tidemark.checkpoint.restore_planner.plan_restore`), so a different parallelism rescales:
keyed state by key groups (each task's backend restores from the old tasks' keyed snapshots that
overlap its key groups, whatever backend or mode wrote them), operator state by its mode, source
positions dealt to the new tasks. What the stage needs besides the tasks' state comes back as a
:class:`RestoredStage`: the source positions, the pending write-ahead buffers of the sink and the
channel cut.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.checkpoint.restore_planner import plan_restore
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import CheckpointMetadata, StateHandleKind
from tidemark.runtime.alignment import Channel
from tidemark.runtime.stage_tasks import key_group_range
from tidemark.runtime.task import CUT_STATE, SINK_STATE, StageTask
from tidemark.state import KeyedSnapshot
from tidemark.storage.base import CheckpointStorage
from tidemark.types import OperatorId, TaskId


@dataclass
class RestoredStage:
    """What a restore gives the stage besides its tasks' state."""

    metadata: CheckpointMetadata
    positions: dict[tuple[str, int], int] = field(default_factory=dict)
    sink_items: list[bytes] = field(default_factory=list)
    cut: dict[Channel, int] = field(default_factory=dict)
    rebased: list[TaskId] = field(default_factory=list)


def keyed_snapshots(metadata: CheckpointMetadata, operator_id: OperatorId,
                    key_groups: KeyGroupRange) -> list[KeyedSnapshot]:
    """The keyed snapshots of ``operator_id``'s old tasks whose key groups overlap ``key_groups``."""
    return [KeyedSnapshot.from_task_snapshot(t) for t in metadata.tasks if t.operator_id == operator_id
            and len(key_group_range(t).intersection(key_groups))]


def restore_stage(metadata: CheckpointMetadata, operator_id: OperatorId, tasks: Sequence[StageTask],
                  parallelism: int, storage: CheckpointStorage) -> RestoredStage:
    """``metadata`` must be the stage's job's (the worker checks it as it reads it)."""
    plan = plan_restore(metadata, parallelism)
    operator_handles = [h for t in metadata.tasks if t.operator_id == operator_id
                        for h in t.state_handles if h.kind is StateHandleKind.OPERATOR]
    restored = RestoredStage(metadata)
    sink_items: dict[bytes, None] = {}
    for task in tasks:
        part = plan.for_task(task.task_id)
        task.restore(keyed_snapshots(metadata, operator_id, task.key_groups), operator_handles, storage)
        if task.backend.rebased:
            restored.rebased.append(task.task_id)
        sink_items.update(dict.fromkeys(task.restored_items(SINK_STATE)))
        for item in task.restored_items(CUT_STATE):
            doc: dict[str, Any] = json.loads(item)
            restored.cut[(doc["topic"], doc["partition"], TaskId(doc["task"]))] = doc["offset"]
        for offset in part.source_offsets:
            restored.positions[(offset.topic, offset.partition)] = offset.offset
    restored.sink_items = list(sink_items)
    return restored
