"""Restoring one old task's keyed state outside the job, to read it.

:func:`restored_task` restores the keyed snapshot of one task of a checkpoint or savepoint (or
only some of its key groups) into a fresh scratch backend of the kind that wrote it - heap in
memory, RocksDB on local disk in a temporary directory - through the restore the workers run:
``backend.restore`` for state files (canonical or incremental), and
:func:`~tidemark.changelog.backend.restore.restore_from_changelog` for a changelog-backed task
(its materialized files, then exactly its changelog ranges, read with the given reader). The
restored backend then writes a canonical snapshot of everything it holds into the scratch
directory, whose entries are what the caller reads (:class:`~tidemark.state.snapshot.SnapshotReader`):
every state, registered or not, and the timers (``_timers.<domain>``), in the canonical form
whatever backend wrote them.

TTL timestamps are not checked: the scratch backend's clock stands before any write, so an
expired value the job had not cleaned up yet is read as stored.

Lifecycle: ``with restored_task(...) as snapshot:`` read ``snapshot.states`` and
``snapshot.entries()``; leaving the block closes the backend and deletes the scratch directory.
One task at a time: memory holds one task's canonical snapshot, never the checkpoint's.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tidemark.changelog.backend.restore import restore_from_changelog
from tidemark.changelog.reader import ChangelogReader
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
from tidemark.state.backend import KeyedSnapshot
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.snapshot import SnapshotReader
from tidemark.state.timer_queue import MIN_TIMESTAMP
from tidemark.state.ttl import ManualClock
from tidemark.state_processor.handle_headers import writer_backend
from tidemark.state_processor.source import StateSourceError
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId

ChangelogReaders = Callable[[TaskSnapshot], ChangelogReader]
"""Gives the changelog reader of a changelog-backed task's ranges (e.g. one over the job's Kafka)."""

BEFORE_EVERY_WRITE = MIN_TIMESTAMP // 2  # a TTL timestamp plus its TTL never reaches back here


@contextmanager
def restored_task(metadata: CheckpointMetadata, task: TaskSnapshot, storage: CheckpointStorage, *,
                  key_groups: KeyGroupRange | None = None,
                  changelog: ChangelogReaders | None = None) -> Iterator[SnapshotReader]:
    """The canonical snapshot of ``task``'s keyed state (of ``key_groups`` only, when given: a part
    of the task's), restored as a worker restores it (see the module docstring)."""
    snapshot = KeyedSnapshot.from_task_snapshot(task)
    wanted = snapshot.key_groups if key_groups is None else snapshot.key_groups.intersection(key_groups)
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-state-read-"))
    try:
        context = BackendContext(wanted, metadata.max_parallelism, task.operator_id, scratch / "backend",
                                 clock=ManualClock(BEFORE_EVERY_WRITE))
        backend = create_backend(writer_backend(snapshot.handles, storage), context)
        try:
            if snapshot.ranges:
                if changelog is None:
                    raise StateSourceError(f"task {task.task_id} is changelog-backed: reading it needs the "
                                           "job's changelog (Kafka)")
                restore_from_changelog(backend, [snapshot], storage, changelog(task))
            else:
                backend.restore([snapshot], storage)
            out = FilesystemCheckpointStorage(scratch / "canonical")
            (handle,) = backend.snapshot(CheckpointId(metadata.checkpoint_id), out, canonical=True).handles
        finally:
            backend.close()
        (ref,) = handle.files
        yield SnapshotReader.parse(out.read_verified(ref), f"{task.task_id} (restored)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
