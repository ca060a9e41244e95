"""Restoring a stage's tasks from a checkpoint or savepoint.

``restore_stage(...)`` reads nothing but the given ``_metadata`` and the files and changelog
ranges it names. Every worker restores its own tasks the same way, so a different parallelism or
number of workers rescales: keyed state by key groups (each task's backend restores from the old
tasks' keyed snapshots that overlap its key groups, whatever backend or mode wrote them),
operator state by its mode, and the source positions of the partitions the worker reads,
whichever old tasks held them. What the stage needs besides the tasks' state comes back as a
:class:`RestoredStage`: the source positions, the pending write-ahead buffers of the sink and the
channel cut and the watermarks.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import CheckpointMetadata, StateHandleKind
from tidemark.runtime.worker.outputs import PendingBuffer
from tidemark.runtime.worker.tasks import key_group_range
from tidemark.runtime.job.operator_states import CUT_STATE, SINK_STATE, WATERMARK_STATE
from tidemark.runtime.worker.task import StageTask
from tidemark.state import KeyedSnapshot
from tidemark.storage.base import CheckpointStorage
from tidemark.types import Channel, CheckpointId, OperatorId, TaskId, TopicPartition


@dataclass
class RestoredStage:
    """What a restore gives the stage besides its tasks' state."""

    metadata: CheckpointMetadata
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    sink_items: list[bytes] = field(default_factory=list)
    cut: dict[Channel, int] = field(default_factory=dict)
    watermark_items: list[bytes] = field(default_factory=list)  # every old worker's (runtime.worker.watermarks)
    rebased: list[TaskId] = field(default_factory=list)


def keyed_snapshots(metadata: CheckpointMetadata, operator_id: OperatorId,
                    key_groups: KeyGroupRange) -> list[KeyedSnapshot]:
    """The keyed snapshots of ``operator_id``'s old tasks whose key groups overlap ``key_groups``."""
    return [KeyedSnapshot.from_task_snapshot(t) for t in metadata.tasks if t.operator_id == operator_id
            and len(key_group_range(t).intersection(key_groups))]


def restore_stage(metadata: CheckpointMetadata, operator_id: OperatorId, tasks: Sequence[StageTask],
                  storage: CheckpointStorage, source_operators: Sequence[OperatorId],
                  reads: Collection[TopicPartition]) -> RestoredStage:
    """``metadata`` must be the stage's job's (the worker checks it as it reads it). ``tasks``: the
    worker's (all of the stage's, or its share); ``reads``: the partitions its query reads, whose
    source positions (found under the first of ``source_operators`` that has any) and channel
    cut it gets back."""
    operator_handles = [h for t in metadata.tasks if t.operator_id == operator_id
                        for h in t.state_handles if h.kind is StateHandleKind.OPERATOR]
    restored = RestoredStage(metadata)
    sink_items: dict[bytes, None] = {}
    for task in tasks:
        task.restore(keyed_snapshots(metadata, operator_id, task.key_groups), operator_handles, storage,
                     CheckpointId(metadata.checkpoint_id))
        if task.backend.rebased:
            restored.rebased.append(task.task_id)
        sink_items.update(dict.fromkeys(task.restored_items(SINK_STATE)))
        restored.watermark_items.extend(task.restored_items(WATERMARK_STATE))
        for item in task.restored_items(CUT_STATE):
            doc: dict[str, Any] = json.loads(item)
            if (doc["topic"], doc["partition"]) not in reads:
                continue
            # a channel several old workers read (a border partition, a broadcast input) has the same
            # offset in each after an aligned checkpoint; else the least, so that nothing is skipped
            channel = Channel(doc["topic"], doc["partition"], TaskId(doc["task"]))
            offset = restored.cut.get(channel)
            restored.cut[channel] = doc["offset"] if offset is None else min(offset, doc["offset"])
    restored.positions = source_positions(metadata, source_operators, reads)
    owners = inherited_tasks(metadata, operator_id, [task.key_groups for task in tasks])
    restored.sink_items = [item for item in sink_items if PendingBuffer.decode(item).task in owners]
    return restored


def inherited_tasks(metadata: CheckpointMetadata, operator_id: OperatorId,
                    ranges: Sequence[KeyGroupRange]) -> set[TaskId]:
    """The old tasks of ``operator_id`` whose first key group falls in ``ranges`` (the worker's):
    their pending sink buffers are this worker's to commit. Every old task has exactly one such
    worker at any parallelism and number of workers, so each buffer is committed by one worker
    only (the buffers are union state: every task sees all of them after a restore)."""
    return {t.task_id for t in metadata.tasks if t.operator_id == operator_id
            and any(t.key_group_start in kgr for kgr in ranges)}


def source_positions(metadata: CheckpointMetadata, operators: Sequence[OperatorId],
                     reads: Collection[TopicPartition]) -> dict[TopicPartition, int]:
    """The positions of ``reads`` in ``metadata``, from the first of ``operators`` that has any of
    them (an operator's positions in other topics, e.g. a keyed stage's in its exchange, do not count)."""
    for operator in operators:
        positions = {TopicPartition(o.topic, o.partition): o.offset for t in metadata.tasks if t.operator_id == operator
                     for o in t.source_offsets if (o.topic, o.partition) in reads}
        if positions:
            return positions
    return {}
