"""One task's state replica in the materializer: a RocksDB backend kept at a completed checkpoint.

Lifecycle: ``TaskReplica(directory, options)`` -> ``fold(target, storage, reader)`` brings the
replica to a completed task checkpoint (rebuilding or extending it as
:func:`~tidemark.materializer.replica_planning.plan_fold` says) -> ``snapshot(id, storage)`` writes it as
a materialized snapshot (incremental: files unchanged since the last snapshot or since the
handles it was rebuilt from are reused) -> ``produced(id)`` once that snapshot was announced ->
more folds and snapshots -> ``close()`` (deletes the working copy).

Everything is applied the way a restore applies it: the handles of the checkpoint, then the
records :class:`~tidemark.changelog.reader.ChangelogReader` selects (only the owner of each
range, only its key groups), so records that a failed attempt wrote after a checkpoint are never
applied, and the state definitions logged in the changelog come along.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.changelog.reader import ChangelogReader, ReadStats
from tidemark.changelog.backend.restore import restore_from_changelog
from tidemark.keygroups import KeyGroupRange
from tidemark.materializer.materializer_ledger import TaskCheckpoint
from tidemark.materializer.replica_planning import Current, Extend, FoldPlan, Rebuild, ReplicaLineage, plan_fold
from tidemark.protocol.messages import StateHandle
from tidemark.state.rocksdb.backend import RocksDBStateBackend
from tidemark.state.rocksdb.options import RocksDBOptions
from tidemark.state.rocksdb.snapshot import SnapshotStats
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, MaterializationId


@dataclass(frozen=True, slots=True)
class FoldResult:
    plan: FoldPlan
    read: ReadStats


class TaskReplica:
    """The replica of one task (see the module docstring for the lifecycle)."""

    def __init__(self, directory: Path, options: RocksDBOptions = RocksDBOptions()) -> None:
        self.directory = Path(directory)
        self.options = options
        self.lineage: ReplicaLineage | None = None
        self._backend: RocksDBStateBackend | None = None
        self._generation = 0

    @property
    def backend(self) -> RocksDBStateBackend:
        if self._backend is None:
            raise RuntimeError("the replica holds nothing yet: fold a checkpoint first")
        return self._backend

    def fold(self, target: TaskCheckpoint, storage: CheckpointStorage, reader: ChangelogReader) -> FoldResult:
        """Bring the replica to ``target``; a failure leaves it empty (the next fold rebuilds)."""
        plan = plan_fold(self.lineage, target)
        if isinstance(plan, Current):
            return FoldResult(plan, ReadStats())
        try:
            if isinstance(plan, Rebuild):
                self._rebuild(target, storage, reader)
            else:
                self._extend(target, plan, reader)
        except BaseException:
            self._discard()
            raise
        self.lineage = ReplicaLineage(target) if isinstance(plan, Rebuild) else self._held().at(target)
        return FoldResult(plan, reader.last_stats)

    def _held(self) -> ReplicaLineage:
        assert self.lineage is not None
        return self.lineage

    def _rebuild(self, target: TaskCheckpoint, storage: CheckpointStorage, reader: ChangelogReader) -> None:
        self._discard()
        self._generation += 1
        backend = RocksDBStateBackend(self.directory / f"g{self._generation}", target.key_groups,
                                      target.max_parallelism, options=self.options,
                                      operator_id=target.task.operator_id)
        self._backend = backend
        restore_from_changelog(backend, [target.source()], storage, reader)

    def _extend(self, target: TaskCheckpoint, plan: Extend, reader: ChangelogReader) -> None:
        backend = self.backend

        def on_state_meta(meta: dict[str, Any], key_groups: tuple[KeyGroupRange, ...]) -> None:
            backend.restore_state_metas([meta], "changelog", key_groups)

        for change in reader.read([target.source()], target.key_groups, resume=plan.resume,
                                  on_state_meta=on_state_meta):
            backend.apply_change(change)

    def snapshot(self, materialization_id: MaterializationId,
                 storage: CheckpointStorage) -> tuple[tuple[StateHandle, ...], SnapshotStats]:
        """Write the held state into ``storage`` (a :class:`SharedFilesView`), incrementally."""
        backend = self.backend
        handles = backend.snapshot(CheckpointId(materialization_id), storage).handles
        stats = backend.last_snapshot_stats
        assert stats is not None
        return handles, stats

    def produced(self, materialization_id: MaterializationId) -> None:
        """The snapshot ``materialization_id`` was announced: the task may rebase on it."""
        self.lineage = self._held().with_produced(materialization_id)

    def _discard(self) -> None:
        self.lineage = None
        if self._backend is not None:
            backend, self._backend = self._backend, None
            backend.close()
            shutil.rmtree(backend.path, ignore_errors=True)

    def close(self) -> None:
        """Release the backend and delete the working copy; idempotent."""
        self._discard()
        shutil.rmtree(self.directory, ignore_errors=True)
