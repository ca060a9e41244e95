"""The completed-checkpoint store over real storage and a real event log.

Lifecycle: construct over a ``CheckpointStorage`` and a ``CheckpointEventLog``; after a restart
call ``recover(events)`` once with the whole event log (before anything else); then ``store``
each checkpoint the coordinator asks to persist and ``delete_savepoint`` or ``discard_by_request``
on an operator's request.

Order of effects, which is what makes every crash recoverable:

1. ``store_checkpoint`` checks the state files exist (else publishes a rejection and stops)
   and writes ``_metadata`` atomically;
2. appends ``CheckpointMetadata`` (the confirmation the coordinator waits for) and one
   ``CheckpointDiscarded`` per checkpoint that left retention, in one ``append``;
3. deletes the released files.

A crash before 2 loses nothing (the coordinator asks again; step 1 is idempotent). A crash
between 2 and 3 leaves files to delete: ``recover`` re-deletes the files of the trailing
discards of the log, and publishes (then deletes) any discard implied by the log but missing
from it. Files of a retained checkpoint or savepoint are never deleted.

An aborted checkpoint's files are deleted when the abort is seen (``discard_aborted``), and again
once a later checkpoint is stored: a task may still have been writing them at the abort (its
snapshot under way, e.g. in a worker whose supervisor had fallen silent), but a later checkpoint
completes only when every task acked it, which each does after the earlier snapshot's writes. A
job that takes no later checkpoint (stopped right after the abort: the supervisor's stop aborts
the checkpoint in flight while its workers finish their snapshots) gets the same deletion a few
seconds after the abort (``sweep_late``, which the service schedules), and again at its next
stored checkpoint whenever that comes.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.checkpoint_store.store_event_log import CheckpointEvent, CheckpointEventLog
from tidemark.checkpoint_store.layout import checkpoint_dir, metadata_path
from tidemark.checkpoint_store.metadata_codec import MetadataFormatError, decode_metadata, encode_metadata
from tidemark.checkpoint_store.store import (
    REJECTED_PREFIX,
    CheckpointStoreOptions,
    CompletedCheckpointStore,
    Discard,
    state_files,
)
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, CheckpointType, JobId




class PersistentCheckpointStore:
    """Retention, metadata files and file deletion for one job."""

    def __init__(
        self,
        job_id: JobId,
        storage: CheckpointStorage,
        event_log: CheckpointEventLog,
        options: CheckpointStoreOptions = CheckpointStoreOptions(),
    ) -> None:
        self.job_id = job_id
        self.storage = storage
        self.event_log = event_log
        self.store = CompletedCheckpointStore(job_id, options)
        self._aborted: set[CheckpointId] = set()  # aborted since the last sweep (see the module docstring)
        self.swept: tuple[str, ...] = ()  # the late files the last ``store_checkpoint`` deleted

    def recover(self, events: Iterable[CheckpointEvent], now_ms: int) -> tuple[str, ...]:
        """Rebuild from the event log and finish any interrupted discard; the paths deleted."""
        unpublished: dict[CheckpointId, Discard] = {}
        trailing: list[CheckpointDiscarded] = []
        for event in events:
            if event.job_id != self.job_id:
                continue
            for discard in self.store.fold(event):
                unpublished[discard.checkpoint_id] = discard
            if isinstance(event, CheckpointDiscarded):
                unpublished.pop(event.checkpoint_id, None)
                trailing.append(event)
            else:
                trailing.clear()
        owed = [unpublished[c] for c in sorted(unpublished)]
        if owed:
            self.event_log.append([d.to_event(self.job_id, now_ms) for d in owed])
        paths = sorted({p for e in trailing for p in e.released_files}
                       | {p for d in owed for p in d.deleted_files})
        self._delete(paths)
        return tuple(paths)

    def store_checkpoint(
        self, metadata: CheckpointMetadata, now_ms: int
    ) -> CheckpointMetadata | CheckpointDiscarded:
        """Make ``metadata`` durable and retained; returns the event that was published.

        That is the ``CheckpointMetadata`` confirmation, or a ``CheckpointDiscarded`` whose reason
        starts with ``REJECTED_PREFIX`` when a state file is missing or the checkpoint claims a
        file another checkpoint owns (nothing is written then; the coordinator fails the
        checkpoint instead of waiting for a confirmation that cannot come).
        Idempotent: storing a checkpoint already retained re-publishes its confirmation.
        """
        cid = metadata.checkpoint_id
        retained = self.store.get(cid)
        if retained is not None:
            self.event_log.append([retained])
            return retained
        if self.store.has_seen(cid):
            raise ValueError(f"checkpoint {cid} was already discarded; it cannot be stored again")
        missing = [f.path for f in state_files(metadata) if not self.storage.exists(f.path)]
        conflicts = self.store.ownership_conflicts(metadata)
        if missing or conflicts:
            problem = f"missing state files {missing[:5]}" if missing else f"file ownership: {conflicts[:3]}"
            rejection = CheckpointDiscarded(
                job_id=self.job_id, checkpoint_id=cid, discarded_at=now_ms, reason=f"{REJECTED_PREFIX}{problem}",
            )
            self.event_log.append([rejection])
            return rejection
        path = metadata_path(metadata.job_id, cid, metadata.checkpoint_type)
        self.storage.write_bytes(path, encode_metadata(metadata))
        discards = self.store.add(metadata)
        self.event_log.append([metadata, *(d.to_event(self.job_id, now_ms) for d in discards)])
        self._delete(p for d in discards for p in d.deleted_files)
        self.swept = self._sweep_aborted(cid)
        return metadata

    def discard_aborted(self, checkpoint_id: CheckpointId) -> tuple[str, ...]:
        """Delete the private files tasks wrote for checkpoint ``checkpoint_id``, which was
        aborted (Flink: PendingCheckpoint.dispose). Only the checkpoint's own directories are
        touched (shared files are the registry's), and never those of a checkpoint the store
        retains or has seen complete, nor a directory holding a ``_metadata`` (a completed
        checkpoint this store does not know of, such as one copied in by hand: an aborted
        checkpoint never has one). Idempotent; returns the deleted paths."""
        if self.store.has_seen(checkpoint_id):
            return ()
        self._aborted.add(checkpoint_id)
        return self._delete_private(checkpoint_id)

    def sweep_late(self, checkpoint_id: CheckpointId) -> tuple[str, ...]:
        """Delete again what tasks wrote for the aborted checkpoint ``checkpoint_id`` since its
        abort (a while after it, see the module); nothing for a checkpoint not aborted or seen
        complete. Idempotent; the sweep at the next stored checkpoint still follows."""
        if checkpoint_id not in self._aborted or self.store.has_seen(checkpoint_id):
            return ()
        return self._delete_private(checkpoint_id)

    def _sweep_aborted(self, stored: CheckpointId) -> tuple[str, ...]:
        """Delete again what tasks wrote late for the checkpoints aborted before ``stored``."""
        swept: list[str] = []
        for checkpoint_id in sorted(i for i in self._aborted if i < stored):
            self._aborted.discard(checkpoint_id)
            if not self.store.has_seen(checkpoint_id):
                swept += self._delete_private(checkpoint_id)
        return tuple(swept)

    def _delete_private(self, checkpoint_id: CheckpointId) -> tuple[str, ...]:
        paths: list[str] = []
        for kind in (CheckpointType.CHECKPOINT, CheckpointType.SAVEPOINT):
            if self.storage.exists(metadata_path(self.job_id, checkpoint_id, kind)):
                continue
            directory = checkpoint_dir(self.job_id, checkpoint_id, kind)
            paths.extend(self.storage.list(directory + "/"))
        self._delete(paths)
        return tuple(paths)

    def delete_savepoint(
        self, checkpoint_id: CheckpointId, now_ms: int
    ) -> CheckpointDiscarded | None:
        """Stop retaining a savepoint and delete the files only it used; None if not retained."""
        discard = self.store.delete_savepoint(checkpoint_id)
        if discard is None:
            return None
        event = discard.to_event(self.job_id, now_ms)
        self.event_log.append([event])
        self._delete(discard.deleted_files)
        return event

    def discard_by_request(
        self, checkpoint_id: CheckpointId, now_ms: int
    ) -> CheckpointDiscarded | None:
        """Stop retaining a checkpoint or savepoint an operator discards (its ``_metadata`` may
        be corrupted or gone: what to delete comes from the log) and delete the files only it
        used; None if not retained."""
        discard = self.store.discard_by_request(checkpoint_id)
        if discard is None:
            return None
        event = discard.to_event(self.job_id, now_ms)
        self.event_log.append([event])
        self._delete(discard.deleted_files)
        return event

    def load(self, checkpoint_id: CheckpointId) -> CheckpointMetadata:
        """The retained checkpoint's metadata as read back from its ``_metadata`` file."""
        retained = self.store.get(checkpoint_id)
        if retained is None:
            raise KeyError(f"checkpoint {checkpoint_id} is not retained")
        return read_metadata(
            self.storage, metadata_path(self.job_id, checkpoint_id, retained.checkpoint_type)
        )

    def _delete(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.storage.delete(path)


def read_metadata(storage: CheckpointStorage, path: str) -> CheckpointMetadata:
    """Decode the ``_metadata`` file at ``path`` (what a restore reads); a
    ``MetadataFormatError`` names the file."""
    data = storage.read_bytes(path)
    try:
        return decode_metadata(data)
    except MetadataFormatError as exc:
        raise type(exc)(f"{path}: {exc}") from None
