"""One materialization: fold a task's replica up to a completed checkpoint, write the snapshot,
check it, and describe it as the ``MaterializationEvent`` to announce.

Blocking (RocksDB, Kafka reads, storage uploads): the service runs it off its event loop.
Nothing is announced by this module; the caller publishes the returned event, then tells the
replica (``replica.produced``) so that the task's later checkpoints, which rebase on it, extend
the replica instead of rebuilding it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from tidemark.changelog.reader import ChangelogReader, ReadStats
from tidemark.materializer.materializer_ledger import TaskCheckpoint
from tidemark.materializer.replica import TaskReplica
from tidemark.materializer.storage import SharedFilesView, materialization_prefix
from tidemark.protocol.messages import MaterializationEvent, MaterializationStatus
from tidemark.storage.base import CheckpointStorage, StorageError
from tidemark.types import MaterializationId


class MaterializationError(RuntimeError):
    """A materialized snapshot is not usable (e.g. a reused file is gone from storage)."""


@dataclass(frozen=True, slots=True)
class MaterializationOutcome:
    """A completed materialization: the event to announce and what it cost."""

    event: MaterializationEvent
    fold: str  # "rebuild", "extend" or "current"
    read: ReadStats
    duration_s: float
    upload_s: float
    full_size_bytes: int
    incremental_size_bytes: int


def materialize(target: TaskCheckpoint, replica: TaskReplica, storage: CheckpointStorage,
                reader: ChangelogReader, materialization_id: MaterializationId,
                now_ms: int) -> MaterializationOutcome:
    """Materialize ``target`` into ``storage`` under the task's folder (raises on failure)."""
    started = time.monotonic()
    folded = replica.fold(target, storage, reader)
    view = SharedFilesView(storage, materialization_prefix(target.job_id, target.task.task_id),
                           f"m-{materialization_id}-{secrets.token_hex(4)}")
    upload_started = time.monotonic()
    handles, stats = replica.snapshot(materialization_id, view)
    upload_s = time.monotonic() - upload_started
    missing = [f.path for h in handles for f in h.files if not _exists(storage, f.path)]
    if missing:
        replica.close()  # its reuse cache names files that are gone: rebuild next time
        raise MaterializationError(f"reused files are gone from checkpoint storage: {missing[:5]}")
    event = MaterializationEvent(
        job_id=target.job_id, task_id=target.task.task_id, operator_id=target.task.operator_id,
        materialization_id=materialization_id, status=MaterializationStatus.COMPLETED,
        checkpoint_id=target.checkpoint_id, covered_ranges=target.task.changelog_ranges,
        state_handles=handles, at=now_ms)
    return MaterializationOutcome(event, type(folded.plan).__name__.lower(), folded.read,
                                  time.monotonic() - started, upload_s, stats.state_size,
                                  stats.bytes_written)


def failure_event(target: TaskCheckpoint, materialization_id: MaterializationId, now_ms: int,
                  error: BaseException) -> MaterializationEvent:
    """The FAILED event announcing that materializing ``target`` did not work."""
    return MaterializationEvent(
        job_id=target.job_id, task_id=target.task.task_id, operator_id=target.task.operator_id,
        materialization_id=materialization_id, status=MaterializationStatus.FAILED,
        checkpoint_id=target.checkpoint_id, covered_ranges=(), at=now_ms,
        error=f"{type(error).__name__}: {error}"[:2000])


def _exists(storage: CheckpointStorage, path: str) -> bool:
    try:
        return storage.exists(path)
    except StorageError:
        return False
