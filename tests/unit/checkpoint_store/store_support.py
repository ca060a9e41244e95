"""Builders for checkpoint-store tests: metadata whose state files really exist in storage."""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.protocol.messages import (
    CheckpointMetadata,
    StateFile,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, CheckpointType, JobId, KeyGroup, OperatorId, TaskId

JOB = JobId("job")


def metadata(
    checkpoint_id: int,
    files: Iterable[StateFile],
    kind: CheckpointType = CheckpointType.CHECKPOINT,
    job: JobId = JOB,
) -> CheckpointMetadata:
    """One task with one keyed handle holding ``files``."""
    files = tuple(files)
    handle = StateHandle(StateHandleKind.KEYED_INCREMENTAL, OperatorId("agg"), KeyGroup(0),
                         KeyGroup(127), files, sum(f.size_bytes for f in files), 1)
    task = TaskSnapshot(TaskId("agg#0"), OperatorId("agg"), 0, KeyGroup(0), KeyGroup(127),
                        state_handles=(handle,))
    return CheckpointMetadata(job, CheckpointId(checkpoint_id), kind, checkpoint_id * 10,
                              checkpoint_id * 10 + 5, 128, (task,), state_size_bytes=handle.state_size_bytes)


def private_file(checkpoint_id: int, name: str = "state") -> StateFile:
    return StateFile(f"{JOB}/chk-{checkpoint_id}/{name}", 3, "0" * 64)


def shared_file(name: str) -> StateFile:
    return StateFile(f"{JOB}/shared/{name}", 3, "0" * 64, shared=True)


def write_files(storage: CheckpointStorage, files: Iterable[StateFile]) -> tuple[StateFile, ...]:
    """Write each file (as a task would) and return the refs storage reports."""
    return tuple(storage.write_bytes(f.path, f.path.encode(), shared=f.shared) for f in files)
