"""Writing a savepoint outside a job: its folder, its state files and its ``_metadata``.

A :class:`SavepointWriter` writes one savepoint of a job into checkpoint storage, as a stopped
job's savepoint is laid out: a target folder inside the job's savepoint area (refused, as a
savepoint request's target is, when it is outside that area or is, or lies inside, an existing
savepoint: :func:`~tidemark.checkpoint_store.catalog.check_savepoint_target`), the tasks' state
files under ``<target>/<stage>/chk-<id>/`` (written by a :class:`~.task_writer.TaskWriter`, or
copied byte for byte from another checkpoint: :meth:`SavepointWriter.copy`), and the
``_metadata`` (a ``SAVEPOINT``'s :class:`~tidemark.protocol.messages.CheckpointMetadata`) written
last. :meth:`~SavepointWriter.commit` then verifies the savepoint as a start verifies the one it
names (:func:`~tidemark.checkpoint_store.verification.verify_checkpoint`: the metadata's checksum,
every file's size and SHA-256). A job starts from it with ``tidemark jobs run ... --from-savepoint
<target>/_metadata``.

Used as a context manager, a writer that did not commit deletes what it wrote. The savepoint is
self-contained: it references no file of another checkpoint, so it outlives the one it came from.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.checkpoint_store.catalog import check_savepoint_target, list_retained
from tidemark.checkpoint_store.layout import METADATA_FILE, savepoint_area, shared_dir
from tidemark.checkpoint_store.metadata_codec import encode_metadata
from tidemark.checkpoint_store.verification import verify_checkpoint
from tidemark.protocol.messages import CheckpointMetadata, StateFile, TaskSnapshot
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, CheckpointType, JobId


class WriteOptionError(ValueError):
    """A savepoint asked for that no job can have (a parallelism, max parallelism, backend or stage
    name): the message is one line."""


@dataclass(frozen=True)
class WrittenSavepoint:
    """A savepoint written and verified: its ``_metadata`` path and what it holds."""

    path: str
    metadata: CheckpointMetadata

    @property
    def directory(self) -> str:
        return self.path.rsplit("/", 1)[0]


def next_checkpoint_id(storage: CheckpointStorage, job: str) -> int:
    """One more than the newest retained checkpoint or savepoint id of ``job`` (1 for none): a job
    started from a savepoint numbers its checkpoints after the savepoint's id, so its exactly-once
    output commits under ids no earlier run of the job used."""
    ids = [e.metadata.checkpoint_id for savepoints in (False, True)
           for e in list_retained(storage, JobId(job), savepoints=savepoints).entries]
    return max(ids, default=0) + 1


def default_target(job: str, what: str, checkpoint_id: int) -> str:
    """``<job>/savepoints/<what>-<id>-<now in ms>``."""
    return f"{savepoint_area(JobId(job))}/{what}-{checkpoint_id}-{int(time.time() * 1000)}"


class SavepointWriter:
    """One savepoint of ``job`` being written into ``target`` (see the module docstring)."""

    def __init__(self, storage: CheckpointStorage, job: str, target: str, *, checkpoint_id: int,
                 max_parallelism: int) -> None:
        self.storage = storage
        self.job = JobId(job)
        self.target = target.strip("/")
        self.checkpoint_id = checkpoint_id
        self.max_parallelism = max_parallelism
        self.started_at = int(time.time() * 1000)
        check_savepoint_target(storage, self.job, self.target)
        self.files = SnapshotStorage(storage, self.target, shared_dir(self.job))
        self.tasks: list[TaskSnapshot] = []
        self.committed: WrittenSavepoint | None = None

    @property
    def metadata_path(self) -> str:
        return f"{self.target}/{METADATA_FILE}"

    def copy(self, ref: StateFile, stage: str) -> StateFile:
        """``ref`` (a file of another checkpoint, read verified) written again into this
        savepoint's folder of ``stage``, under the same file name."""
        data = self.storage.read_verified(ref)
        return self.files.write_bytes(f"{stage}/chk-{self.checkpoint_id}/{ref.path.rsplit('/', 1)[-1]}", data)

    def add(self, tasks: Iterable[TaskSnapshot]) -> None:
        self.tasks.extend(tasks)

    def commit(self) -> WrittenSavepoint:
        """Write the ``_metadata`` of the tasks added, then verify the whole savepoint."""
        tasks = tuple(sorted(self.tasks, key=lambda t: (t.operator_id, t.subtask_index)))
        size = sum(h.state_size_bytes for t in tasks for h in t.state_handles)
        metadata = CheckpointMetadata(self.job, CheckpointId(self.checkpoint_id), CheckpointType.SAVEPOINT,
                                      self.started_at, int(time.time() * 1000), self.max_parallelism, tasks,
                                      state_size_bytes=size, checkpointed_size_bytes=size)
        self.storage.write_bytes(self.metadata_path, encode_metadata(metadata))
        self.committed = WrittenSavepoint(self.metadata_path, verify_checkpoint(self.storage, self.metadata_path))
        return self.committed

    def discard(self) -> None:
        """Delete everything written into the target folder."""
        for path in list(self.storage.list(f"{self.target}/")):
            self.storage.delete(path)

    def __enter__(self) -> SavepointWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self.committed is None:
            self.discard()
