"""Property: under any sequence of checkpoints, savepoints, savepoint deletions and restarts,
storage holds exactly the files of the retained checkpoints and savepoints (none of theirs is
ever deleted, every other one is), and the event log rebuilds the same store."""

from __future__ import annotations

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st
from store_support import JOB, metadata, private_file, shared_file, write_files

from tidemark.checkpoint_store import (
    CheckpointStoreOptions,
    CompletedCheckpointStore,
    InMemoryCheckpointEventLog,
    PersistentCheckpointStore,
    metadata_path,
    state_files,
)
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointType

SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None  # fsync is cheap on tmpfs

shared_sets = st.frozensets(st.integers(0, 5), max_size=4)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("checkpoint"), shared_sets),
        st.tuples(st.just("savepoint"), shared_sets),
        st.tuples(st.just("delete_savepoint"), st.integers(0, 10)),
        st.tuples(st.just("restart"), st.just(0)),
    ),
    min_size=1,
    max_size=25,
)


def expected_files(store: CompletedCheckpointStore) -> set[str]:
    files = set()
    for m in store.retained():
        files.add(metadata_path(m.job_id, m.checkpoint_id, m.checkpoint_type))
        files.update(f.path for f in state_files(m))
    return files


@settings(max_examples=60, deadline=None)
@given(retained=st.integers(1, 3), ops=operations)
def test_storage_holds_exactly_the_retained_files(retained: int, ops: list[tuple[str, object]]) -> None:
    options = CheckpointStoreOptions(retained_checkpoints=retained)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as root:
        storage = FilesystemCheckpointStorage(root)
        log = InMemoryCheckpointEventLog()
        store = PersistentCheckpointStore(JOB, storage, log, options)
        next_id, checkpoints, savepoints = 1, 0, 0
        for now, (op, arg) in enumerate(ops):
            if op in ("checkpoint", "savepoint"):
                kind = CheckpointType.CHECKPOINT if op == "checkpoint" else CheckpointType.SAVEPOINT
                wanted = [private_file(next_id, "p"), *(shared_file(f"s{j}") for j in sorted(arg))]
                store.store_checkpoint(metadata(next_id, write_files(storage, wanted), kind), now)
                checkpoints += op == "checkpoint"
                savepoints += op == "savepoint"
                next_id += 1
            elif op == "delete_savepoint":
                kept = store.store.savepoints()
                if kept:
                    store.delete_savepoint(kept[arg % len(kept)].checkpoint_id, now)  # type: ignore[operator]
                    savepoints -= 1
            else:
                store = PersistentCheckpointStore(JOB, storage, log, options)
                store.recover(list(log.events), now)
            assert set(storage.list(f"{JOB}/")) == expected_files(store.store)
            assert len(store.store.checkpoints()) == min(retained, checkpoints)
            assert len(store.store.savepoints()) == savepoints
        rebuilt = CompletedCheckpointStore(JOB, options)
        for event in log.events:
            rebuilt.fold(event)
        assert rebuilt.retained() == store.store.retained()
        assert rebuilt.registry.reference_counts() == store.store.registry.reference_counts()
