"""Restoring one old task's keyed state outside the job, to read it.

:func:`restored_task` restores the keyed snapshot of one task of a checkpoint or savepoint (or
only some of its key groups) into a fresh scratch backend of the kind that wrote it - heap in
memory, RocksDB on local disk in a temporary directory - through the restore the workers run:
``backend.restore`` for state files (canonical or incremental), and
:func:`~tidemark.changelog.backend.restore.restore_from_changelog` for a changelog-backed task
(its materialized files, then exactly its changelog ranges, read with the given reader). The
caller then reads the restored backend's :meth:`canonical_state
<tidemark.state.local_backend.LocalKeyedStateBackend.canonical_state>`: every state, registered or
not, and the timers (``_timers.<domain>``), as the entries of the canonical snapshot it would write,
whatever backend wrote them - streamed from the backend, no snapshot written.

TTL timestamps are not checked: the scratch backend's clock stands before any write, so an
expired value the job had not cleaned up yet is read as stored.

Lifecycle: ``with restored_task(...) as task_state:`` read ``task_state.states`` and
``task_state.entries()`` (once, inside the block); leaving the block closes the backend and deletes
the scratch directory. Memory: one task at a time, never the checkpoint's; a RocksDB task is read
through its scratch database's bounded block cache and write buffers (its state stays on disk), a
heap task's state is held in memory, as the job held it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.changelog.backend.restore import restore_from_changelog
from tidemark.changelog.reader import ChangelogReader
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
from tidemark.state.backend import KeyedSnapshot
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.rocksdb.options import RocksDBOptions, RocksDBSetup
from tidemark.state.snapshot import Entry
from tidemark.state.timer_queue import MIN_TIMESTAMP
from tidemark.state.ttl import ManualClock
from tidemark.state_processor.handle_headers import writer_backend
from tidemark.state_processor.source import StateSourceError
from tidemark.storage.base import CheckpointStorage

ChangelogReaders = Callable[[TaskSnapshot], ChangelogReader]
"""Gives the changelog reader of a changelog-backed task's ranges (e.g. one over the job's Kafka)."""

BEFORE_EVERY_WRITE = MIN_TIMESTAMP // 2  # a TTL timestamp plus its TTL never reaches back here

SCRATCH_ROCKSDB = RocksDBSetup(RocksDBOptions(block_cache_bytes=16 << 20, write_buffer_bytes=4 << 20,
                                              write_buffer_total_bytes=8 << 20))
"""A RocksDB scratch backend's budget: its memtables (what a canonical file's restore writes
passes through them) and its cache are small and fill up the same way whatever the task's size,
so a read's memory does not depend on it; the entries are read without filling the cache."""


@dataclass(frozen=True)
class RestoredState:
    """The restored keyed state of one old task: each state's definition, and its entries in the
    canonical form, streaming from the scratch backend (to take once, inside the block)."""

    states: list[dict[str, Any]]
    _entries: Iterator[Entry]

    def entries(self) -> Iterator[Entry]:
        return self._entries


@contextmanager
def restored_task(metadata: CheckpointMetadata, task: TaskSnapshot, storage: CheckpointStorage, *,
                  key_groups: KeyGroupRange | None = None,
                  changelog: ChangelogReaders | None = None) -> Iterator[RestoredState]:
    """The keyed state of ``task`` (of ``key_groups`` only, when given: a part of the task's),
    restored as a worker restores it (see the module docstring)."""
    snapshot = KeyedSnapshot.from_task_snapshot(task)
    wanted = snapshot.key_groups if key_groups is None else snapshot.key_groups.intersection(key_groups)
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-state-read-"))
    try:
        context = BackendContext(wanted, metadata.max_parallelism, task.operator_id, scratch / "backend",
                                 clock=ManualClock(BEFORE_EVERY_WRITE), backend_options=SCRATCH_ROCKSDB)
        backend = create_backend(writer_backend(snapshot.handles, storage), context)
        try:
            if snapshot.ranges:
                if changelog is None:
                    raise StateSourceError(f"task {task.task_id} is changelog-backed: reading it needs the "
                                           "job's changelog (Kafka)")
                restore_from_changelog(backend, [snapshot], storage, changelog(task))
            else:
                backend.restore([snapshot], storage)
            if not isinstance(backend, LocalKeyedStateBackend):
                raise TypeError(f"a scratch backend of {type(backend).__name__} cannot be read in place")
            yield RestoredState(*backend.canonical_state())
        finally:
            backend.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
