"""Where a restored stage resumes its channels (``restore_stage``'s cut): each old worker stores the
cut of the channels it read; a channel that several old workers read (a broadcast input, read
whole by every worker; a partition on the border of two workers' key groups) resumes at the least
of their offsets, which after an aligned checkpoint are the same, and at least once never skips
what one of them had not processed. Only the channels the new worker reads come back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.api import KeyedProcessFunction, Stage
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange
from tidemark.operators.time import StageTime
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
from tidemark.runtime.job.operator_states import CUT_STATE, SINK_STATE, WATERMARK_STATE
from tidemark.runtime.worker.restore import restore_stage
from tidemark.runtime.worker.task import StageTask
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import Channel, CheckpointId, CheckpointType, JobId, TaskId, TopicPartition

pytestmark = pytest.mark.unit


class _Nothing(KeyedProcessFunction):
    def process(self, value, ctx):
        pass


STAGE = Stage("s", ("up.out",), lambda v: v, _Nothing, "out")


def _tasks(parallelism: int, local: Path) -> list[StageTask]:
    tasks = []
    for assignment in plan_assignments((STAGE.operator_id,), parallelism, 128):
        context = BackendContext(KeyGroupRange(assignment.key_group_start, assignment.key_group_end), 128,
                                 STAGE.name, local / f"{parallelism}-{assignment.subtask_index}")
        tasks.append(StageTask(STAGE, assignment, parallelism, create_backend("heap", context), StageTime()))
    return tasks


def _cut(**offsets: int) -> list[bytes]:
    """Cut items of channel ``up.out`` partition n (``p<n>=offset``) from writer ``up#0``."""
    return [json.dumps({"topic": "up.out", "partition": int(name[1:]), "task": "up#0", "offset": offset}).encode()
            for name, offset in offsets.items()]


@pytest.mark.parametrize("offsets", [(40, 40), (40, 25), (25, 40)])
def test_a_channel_two_old_workers_read_resumes_at_their_least_offset(tmp_path: Path, offsets: tuple[int, int]) -> None:
    storage = FilesystemCheckpointStorage(str(tmp_path / "storage"))
    old = _tasks(2, tmp_path)  # two old workers of one task each; both read partition 1 (the border)
    cuts = [_cut(p0=10, p1=offsets[0]), _cut(p1=offsets[1], p2=70)]
    snapshots = []
    for task, cut in zip(old, cuts):
        task.open()
        keyed, operator = task.snapshot(CheckpointId(5), storage, canonical=True,
                                        operator_items={CUT_STATE: cut, SINK_STATE: [], WATERMARK_STATE: []}).run()
        a = task.assignment
        snapshots.append(TaskSnapshot(a.task_id, a.operator_id, a.subtask_index, a.key_group_start, a.key_group_end,
                                      state_handles=keyed.handles + operator))
        task.close()
    metadata = CheckpointMetadata(JobId("j"), CheckpointId(5), CheckpointType.SAVEPOINT, 0, 0, 128, tuple(snapshots))
    new = _tasks(3, tmp_path)[:2]  # a new worker with two of three tasks, reading partitions 0 and 1
    restored = restore_stage(metadata, STAGE.operator_id, new, storage, (STAGE.operator_id,),
                             {TopicPartition("up.out", 0), TopicPartition("up.out", 1)})
    assert restored.cut == {Channel("up.out", 0, TaskId("up#0")): 10, Channel("up.out", 1, TaskId("up#0")): min(offsets)}
