"""The HTTP API's response documents, rendered from the coordinator's state and statistics and
from ``_metadata`` files. Every function returns plain JSON-serializable data; times are epoch
milliseconds, durations milliseconds, sizes bytes.
"""

from __future__ import annotations

from typing import Any

from tidemark.checkpoint import CheckpointCoordinator, CheckpointStatsEntry, CheckpointStatsSnapshot
from tidemark.checkpoint.task_workers import tasks_by_worker
from tidemark.protocol.messages import CheckpointMetadata, RestoreCommand, SavepointRequest
from tidemark.types import CheckpointId, JobId


def error_document(status: int, message: str) -> dict[str, Any]:
    return {"error": message, "status": status}


def entry_document(entry: CheckpointStatsEntry) -> dict[str, Any]:
    """One checkpoint of the history (Flink's checkpoint stats, per checkpoint)."""
    return {
        "id": entry.checkpoint_id,
        "type": entry.checkpoint_type.value,
        "status": entry.status.value,
        "triggered_at": entry.triggered_at,
        "ended_at": entry.ended_at,
        "duration_ms": entry.duration_ms,
        "checkpointed_size_bytes": entry.checkpointed_size_bytes,
        "full_size_bytes": entry.state_size_bytes,
        "num_tasks": entry.num_tasks,
        "num_acknowledged": entry.num_acknowledged,
        "alignment_ms": max((t.alignment_ms for _, t in entry.task_timings), default=None),
        "failure_reason": entry.failure_reason,
        "metadata_path": entry.metadata_path,
    }


def checkpoint_detail_document(job: JobId, entry: CheckpointStatsEntry) -> dict[str, Any]:
    """One checkpoint of the history with the acks its tasks sent so far, by task id (Flink's
    per-subtask checkpoint stats)."""
    return {
        "job": job,
        "checkpoint": entry_document(entry),
        "acks": [{"task_id": task, "alignment_ms": t.alignment_ms, "sync_ms": t.sync_ms,
                  "async_ms": t.async_ms, "processed_bytes": t.processed_bytes}
                 for task, t in entry.task_timings],
    }


def counts_document(snapshot: CheckpointStatsSnapshot) -> dict[str, int]:
    counts = snapshot.counts
    return {"triggered": counts.triggered, "in_progress": counts.in_progress,
            "completed": counts.completed, "failed": counts.failed, "restored": counts.restored}


def history_document(job: JobId, snapshot: CheckpointStatsSnapshot) -> dict[str, Any]:
    """The bounded checkpoint history of ``job``, newest first, with its counts."""
    return {
        "job": job,
        "counts": counts_document(snapshot),
        "last_restore_at": snapshot.last_restore_at,
        "last_restored_checkpoint_id": snapshot.last_restored_checkpoint_id,
        "checkpoints": [entry_document(e) for e in sorted(
            snapshot.history, key=lambda e: e.checkpoint_id, reverse=True)],
    }


def job_document(job: JobId, coordinator: CheckpointCoordinator) -> dict[str, Any]:
    """What ``GET /jobs`` says about one job."""
    snapshot = coordinator.stats()
    last = snapshot.last_completed
    status = coordinator.status
    return {
        "job": job,
        "epoch": max(coordinator.active_epoch, 0),  # 0: no attempt announced yet (attempts count from 1)
        "state": status.state.value,
        "state_reason": status.reason,
        "stopping": coordinator.is_stopping,
        "finishing": coordinator.is_finishing,
        "suspended_generation": coordinator.suspended_generation,
        "pending_checkpoints": list(coordinator.pending_checkpoint_ids),
        "consecutive_failures": coordinator.consecutive_failures,
        "counts": counts_document(snapshot),
        "last_completed": None if last is None else entry_document(last),
        "last_savepoint": None if snapshot.last_savepoint is None else entry_document(snapshot.last_savepoint),
        "newest_discarded_checkpoint": coordinator.newest_discarded_by_request,
        "workers": workers_document(coordinator),
    }


def workers_document(coordinator: CheckpointCoordinator) -> dict[str, list[list[str]]]:
    """The newest registered attempt's tasks by stage and worker process: operator id -> one list
    of task ids per worker, indexed by worker (``{}`` before an attempt registered tasks)."""
    registration = coordinator.registration
    if registration is None:
        return {}
    return {operator: [list(tasks) for tasks in workers]
            for operator, workers in tasks_by_worker(registration).items()}


def metadata_document(path: str, metadata: CheckpointMetadata) -> dict[str, Any]:
    """A retained checkpoint or savepoint, from its ``_metadata`` file at ``path``."""
    return {
        "id": metadata.checkpoint_id,
        "type": metadata.checkpoint_type.value,
        "path": path,
        "epoch": metadata.epoch,
        "triggered_at": metadata.triggered_at,
        "completed_at": metadata.completed_at,
        "duration_ms": metadata.completed_at - metadata.triggered_at,
        "checkpointed_size_bytes": metadata.checkpointed_size_bytes,
        "full_size_bytes": metadata.state_size_bytes,
        "max_parallelism": metadata.max_parallelism,
        "num_tasks": len(metadata.tasks),
    }


def savepoint_request_document(
    request: SavepointRequest, savepoint_id: CheckpointId | None, status: str,
    entry: CheckpointStatsEntry | None, metadata_path: str | None, *, failure_reason: str | None = None,
) -> dict[str, Any]:
    """Where a savepoint request stands: PENDING (queued, not triggered yet), IN_PROGRESS,
    COMPLETED, FAILED (the savepoint failed, or the job finished before it was triggered, with
    ``failure_reason`` and no ``savepoint_id``), or UNKNOWN (triggered, but gone from the bounded
    history and not in storage)."""
    return {
        "request_id": request.request_id,
        "job": request.job_id,
        "stop": request.stop,
        "target": request.target_location,
        "requested_at": request.requested_at,
        "savepoint_id": savepoint_id,
        "status": status,
        "metadata_path": metadata_path,
        "failure_reason": failure_reason if entry is None else entry.failure_reason,
        "checkpoint": None if entry is None else entry_document(entry),
    }


def restore_document(command: RestoreCommand) -> dict[str, Any]:
    """The restore command the coordinator issued (also written to the control topic)."""
    return {
        "restore_id": command.restore_id,
        "job": command.job_id,
        "checkpoint_id": command.checkpoint_id,
        "is_savepoint": command.is_savepoint,
        "metadata_path": command.metadata_path,
        "parallelism": command.parallelism,
        "max_parallelism": command.max_parallelism,
        "epoch": command.epoch,
        "issued_at": command.issued_at,
        "assignments": [
            {"task_id": a.task_id, "operator_id": a.operator_id, "subtask_index": a.subtask_index,
             "key_group_start": a.key_group_start, "key_group_end": a.key_group_end}
            for a in command.assignments
        ],
    }
