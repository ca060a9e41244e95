"""Which completed checkpoints and savepoints are retained (Flink: CompletedCheckpointStore).

Pure bookkeeping, no I/O. Lifecycle: one store per job; ``add`` every confirmed checkpoint or
savepoint (any order, each id once; adding an id again is a no-op), ``delete_savepoint`` or
``discard_by_request`` on an operator's request. Each returns the :class:`Discard` s it caused: the checkpoints that left
retention and exactly the files that may now be deleted. ``fold`` applies the store's own event
log (``CheckpointMetadata`` = added, ``CheckpointDiscarded`` = left retention), so a restarted
store rebuilt from its log has the same retained set and reference counts.

Invariants: the newest ``retained_checkpoints`` checkpoints (by id) and every savepoint not
explicitly deleted are retained; a discard never lists a file that a retained checkpoint or
savepoint references.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.checkpoint_store.store_event_log import CheckpointEvent
from tidemark.checkpoint_store.layout import metadata_path
from tidemark.checkpoint_store.shared_state_registry import SharedStateRegistry
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata, StateFile
from tidemark.types import CheckpointId, CheckpointType, JobId

RETENTION = "retention"
DELETED_BY_REQUEST = "deleted by request"
REJECTED_PREFIX = "rejected: "
"""Reason prefix of a ``CheckpointDiscarded`` for a checkpoint the store refused to retain."""


@dataclass(frozen=True, slots=True)
class CheckpointStoreOptions:
    """``retained_checkpoints``: how many of the newest checkpoints to keep (>= 1)."""

    retained_checkpoints: int = 1

    def __post_init__(self) -> None:
        if self.retained_checkpoints < 1:
            raise ValueError(f"retained_checkpoints must be >= 1, got {self.retained_checkpoints}")


@dataclass(frozen=True, slots=True)
class Discard:
    """A checkpoint or savepoint that left retention, and the files now safe to delete."""

    checkpoint_id: CheckpointId
    checkpoint_type: CheckpointType
    reason: str
    deleted_files: tuple[str, ...]  # its _metadata, its private files, freed shared files

    def to_event(self, job_id: JobId, discarded_at: int) -> CheckpointDiscarded:
        return CheckpointDiscarded(
            job_id=job_id,
            checkpoint_id=self.checkpoint_id,
            discarded_at=discarded_at,
            reason=self.reason,
            released_files=self.deleted_files,
        )


def state_files(metadata: CheckpointMetadata) -> tuple[StateFile, ...]:
    """Every state file a checkpoint references (not its ``_metadata``)."""
    return tuple(f for t in metadata.tasks for h in t.state_handles for f in h.files)


class CompletedCheckpointStore:
    """Retained checkpoints and savepoints of one job, with their shared-file counts."""

    def __init__(self, job_id: JobId, options: CheckpointStoreOptions) -> None:
        self.job_id = job_id
        self.options = options
        self.registry = SharedStateRegistry()
        self._retained: dict[CheckpointId, CheckpointMetadata] = {}
        self._private_owner: dict[str, CheckpointId] = {}
        self._seen: set[CheckpointId] = set()

    # ------------------------------------------------------------------ queries

    def retained(self) -> tuple[CheckpointMetadata, ...]:
        """Every retained checkpoint and savepoint, by id."""
        return tuple(self._retained[c] for c in sorted(self._retained))

    def checkpoints(self) -> tuple[CheckpointMetadata, ...]:
        return tuple(m for m in self.retained() if not m.checkpoint_type.is_savepoint)

    def savepoints(self) -> tuple[CheckpointMetadata, ...]:
        return tuple(m for m in self.retained() if m.checkpoint_type.is_savepoint)

    def get(self, checkpoint_id: CheckpointId) -> CheckpointMetadata | None:
        return self._retained.get(checkpoint_id)

    def latest(self) -> CheckpointMetadata | None:
        """The newest retained checkpoint or savepoint (what a failover restores)."""
        return self._retained[max(self._retained)] if self._retained else None

    def has_seen(self, checkpoint_id: CheckpointId) -> bool:
        """Added at some point (retained now or already discarded)."""
        return checkpoint_id in self._seen

    # ------------------------------------------------------------------ changes

    def add(self, metadata: CheckpointMetadata) -> tuple[Discard, ...]:
        """Retain ``metadata``; discard the oldest checkpoints beyond the retention count."""
        self._check_job(metadata.job_id)
        cid = metadata.checkpoint_id
        if cid in self._seen:
            return ()
        self._check_private_files(metadata)
        files = state_files(metadata)
        self._seen.add(cid)
        self._retained[cid] = metadata
        self.registry.register(cid, files)
        for f in files:
            if not f.shared:
                self._private_owner[f.path] = cid
        excess = len(self.checkpoints()) - self.options.retained_checkpoints
        oldest = [m.checkpoint_id for m in self.checkpoints()[: max(excess, 0)]]
        return tuple(self._discard(c, RETENTION) for c in oldest)

    def delete_savepoint(self, checkpoint_id: CheckpointId) -> Discard | None:
        """Stop retaining savepoint ``checkpoint_id``; None when it is not retained."""
        metadata = self._retained.get(checkpoint_id)
        if metadata is None:
            return None
        if not metadata.checkpoint_type.is_savepoint:
            raise ValueError(f"{checkpoint_id} is a checkpoint: only savepoints are deleted")
        return self._discard(checkpoint_id, DELETED_BY_REQUEST)

    def discard_by_request(self, checkpoint_id: CheckpointId) -> Discard | None:
        """Stop retaining checkpoint or savepoint ``checkpoint_id`` because an operator asked
        (a corrupted checkpoint: docs/operations.md); None when it is not retained. Its id stays
        seen: it is never stored again."""
        if checkpoint_id not in self._retained:
            return None
        return self._discard(checkpoint_id, DELETED_BY_REQUEST)

    def fold(self, event: CheckpointEvent) -> tuple[Discard, ...]:
        """Apply one record of the store's event log; returns the discards it implies."""
        if event.job_id != self.job_id:
            return ()
        if isinstance(event, CheckpointMetadata):
            return self.add(event)
        if event.checkpoint_id in self._retained:
            return (self._discard(event.checkpoint_id, event.reason),)
        return ()

    # ------------------------------------------------------------------ internals

    def _discard(self, checkpoint_id: CheckpointId, reason: str) -> Discard:
        metadata = self._retained.pop(checkpoint_id)
        freed_shared = self.registry.release(checkpoint_id)
        private = sorted({f.path for f in state_files(metadata) if not f.shared})
        for path in private:
            del self._private_owner[path]
        meta_file = metadata_path(metadata.job_id, checkpoint_id, metadata.checkpoint_type)
        return Discard(
            checkpoint_id=checkpoint_id,
            checkpoint_type=metadata.checkpoint_type,
            reason=reason,
            deleted_files=(meta_file, *private, *freed_shared),
        )

    def ownership_conflicts(self, metadata: CheckpointMetadata) -> list[str]:
        """Why ``metadata`` cannot be retained: a file it names as shared that another
        checkpoint owns privately, or a private file another checkpoint references (empty:
        none). A checkpoint already added has none."""
        if metadata.checkpoint_id in self._seen:
            return []
        conflicts = []
        for f in state_files(metadata):
            if f.shared and f.path in self._private_owner:
                conflicts.append(f"{f.path} is private to checkpoint {self._private_owner[f.path]}")
            elif not f.shared and (f.path in self._private_owner or self.registry.reference_count(f.path)):
                conflicts.append(f"checkpoint {metadata.checkpoint_id} claims {f.path}, which another one references")
        return conflicts

    def _check_private_files(self, metadata: CheckpointMetadata) -> None:
        conflicts = self.ownership_conflicts(metadata)
        if conflicts:
            raise ValueError(conflicts[0])

    def _check_job(self, job_id: JobId) -> None:
        if job_id != self.job_id:
            raise ValueError(f"metadata of job {job_id!r} given to the store of {self.job_id!r}")
