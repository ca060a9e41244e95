"""The store over real filesystem storage: _metadata files, deletions, rejection, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import JOB, metadata, private_file, shared_file, write_files

from tidemark.checkpoint_store import (
    REJECTED_PREFIX,
    CheckpointStoreOptions,
    InMemoryCheckpointEventLog,
    MetadataFormatError,
    PersistentCheckpointStore,
    decode_metadata,
    encode_metadata,
    read_metadata,
)
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId, CheckpointType


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    return FilesystemCheckpointStorage(tmp_path / "checkpoints")


def make(storage: FilesystemCheckpointStorage, n: int = 1) -> PersistentCheckpointStore:
    return PersistentCheckpointStore(JOB, storage, InMemoryCheckpointEventLog(),
                                     CheckpointStoreOptions(retained_checkpoints=n))


def test_metadata_roundtrips_through_the_avro_file_format() -> None:
    m = metadata(7, [private_file(7), shared_file("a")], CheckpointType.SAVEPOINT)
    assert decode_metadata(encode_metadata(m)) == m
    for garbage in (b"", b"\x00\x00\x00\x00\x01", b"{\"json\": true}", encode_metadata(m)[:-3]):
        with pytest.raises(MetadataFormatError):
            decode_metadata(garbage)


def test_store_writes_metadata_publishes_and_deletes_discarded_files(storage) -> None:
    s = make(storage, n=1)
    first = metadata(1, write_files(storage, [private_file(1), shared_file("a")]))
    assert s.store_checkpoint(first, 100) == first
    assert read_metadata(storage, "job/chk-1/_metadata") == first == s.load(CheckpointId(1))
    second = metadata(2, write_files(storage, [private_file(2), shared_file("a")]))
    s.store_checkpoint(second, 200)
    assert s.event_log.events[:2] == [first, second]
    (discarded,) = s.event_log.events[2:]
    assert isinstance(discarded, CheckpointDiscarded) and discarded.checkpoint_id == 1
    assert set(discarded.released_files) == {"job/chk-1/_metadata", private_file(1).path}
    assert sorted(storage.list("job/")) == sorted(
        ["job/chk-2/_metadata", private_file(2).path, shared_file("a").path])


def test_storing_again_republishes_the_confirmation(storage) -> None:
    s = make(storage)
    m = metadata(1, write_files(storage, [private_file(1)]))
    s.store_checkpoint(m, 1)
    assert s.store_checkpoint(m, 2) == m
    assert s.event_log.events == [m, m]


def test_missing_state_files_are_rejected_without_writing_metadata(storage) -> None:
    s = make(storage)
    m = metadata(1, [private_file(1)])  # never written
    rejection = s.store_checkpoint(m, 5)
    assert isinstance(rejection, CheckpointDiscarded)
    assert rejection.reason.startswith(REJECTED_PREFIX) and private_file(1).path in rejection.reason
    assert not storage.exists("job/chk-1/_metadata") and s.store.retained() == ()


def test_a_checkpoint_claiming_a_savepoints_private_file_is_rejected_not_retried(storage) -> None:
    """Such a checkpoint can never be retained: the coordinator must hear a rejection (and fail
    it) instead of waiting for a confirmation while the request is dead-lettered again and again."""
    s = make(storage, n=2)
    sp = metadata(4, write_files(storage, [private_file(4, "sp")]), CheckpointType.SAVEPOINT)
    s.store_checkpoint(sp, 1)
    claiming = metadata(5, [private_file(4, "sp")])
    rejection = s.store_checkpoint(claiming, 2)
    assert isinstance(rejection, CheckpointDiscarded) and rejection.reason.startswith(REJECTED_PREFIX)
    assert "ownership" in rejection.reason and private_file(4, "sp").path in rejection.reason
    assert not storage.exists("job/chk-5/_metadata") and s.store.retained() == (sp,)
    assert storage.exists(private_file(4, "sp").path)  # the savepoint keeps its file
    later = metadata(6, write_files(storage, [private_file(6)]))
    assert s.store_checkpoint(later, 3) == later  # and the next checkpoint is stored


def test_savepoints_survive_retention_until_deleted(storage) -> None:
    s = make(storage, n=1)
    sp = metadata(1, write_files(storage, [private_file(1, "sp"), shared_file("a")]), CheckpointType.SAVEPOINT)
    s.store_checkpoint(sp, 1)
    for i in range(2, 5):
        s.store_checkpoint(metadata(i, write_files(storage, [private_file(i), shared_file("a")])), i)
    assert storage.exists("job/savepoints/sp-1/_metadata") and storage.exists(shared_file("a").path)
    event = s.delete_savepoint(CheckpointId(1), 10)
    assert event is not None and event.reason == "deleted by request"
    assert not storage.exists("job/savepoints/sp-1/_metadata")
    assert not storage.exists(private_file(1, "sp").path)
    assert storage.exists(shared_file("a").path)  # checkpoint 4 still uses it
    assert s.delete_savepoint(CheckpointId(1), 11) is None


def test_recover_finishes_a_discard_interrupted_before_it_was_published(storage) -> None:
    one = metadata(1, write_files(storage, [private_file(1)]))
    two = metadata(2, write_files(storage, [private_file(2)]))
    first = make(storage, n=1)
    first.store_checkpoint(one, 1)
    storage.write_bytes("job/chk-2/_metadata", encode_metadata(two))  # crashed after publishing
    log: list[CheckpointMetadata | CheckpointDiscarded] = [one, two]  # ... only the metadata
    restarted = make(storage, n=1)
    deleted = restarted.recover(log, 50)
    assert set(deleted) == {"job/chk-1/_metadata", private_file(1).path}
    assert [e.checkpoint_id for e in restarted.event_log.events] == [1]
    assert not storage.exists(private_file(1).path)
    assert [m.checkpoint_id for m in restarted.store.retained()] == [2]


def test_recover_redeletes_files_of_the_trailing_discards(storage) -> None:
    s = make(storage, n=1)
    one = metadata(1, write_files(storage, [private_file(1)]))
    two = metadata(2, write_files(storage, [private_file(2)]))
    s.store_checkpoint(one, 1)
    s.store_checkpoint(two, 2)
    write_files(storage, [private_file(1)])  # as if the delete after publishing never ran
    restarted = make(storage, n=1)
    restarted.recover(s.event_log.events, 3)
    assert restarted.event_log.events == []  # nothing owed
    assert not storage.exists(private_file(1).path) and storage.exists(private_file(2).path)
    assert restarted.store.registry.reference_counts() == s.store.registry.reference_counts()



def test_an_aborted_checkpoints_files_are_deleted_but_never_a_completed_ones(storage) -> None:
    s = make(storage, n=2)
    done = metadata(1, write_files(storage, [private_file(1), shared_file("a")]))
    s.store_checkpoint(done, 1000)
    aborted = write_files(storage, [private_file(2), private_file(2, "more"), shared_file("b")])
    savepoint_file = storage.write_bytes(f"{JOB}/savepoints/sp-3/state", b"x")
    assert sorted(s.discard_aborted(CheckpointId(2))) == sorted(f.path for f in aborted if not f.shared)
    assert sorted(s.discard_aborted(CheckpointId(3))) == [savepoint_file.path]
    assert s.discard_aborted(CheckpointId(1)) == ()  # completed: never touched
    assert s.discard_aborted(CheckpointId(2)) == ()  # idempotent
    remaining = set(storage.list(f"{JOB}/"))
    assert {f.path for f in done.tasks[0].state_handles[0].files} <= remaining
    assert f"{JOB}/shared/b" in remaining  # shared files belong to the registry


def test_files_a_task_writes_after_the_abort_go_once_a_later_checkpoint_is_stored(storage) -> None:
    """A task's snapshot of checkpoint 2 was under way at its abort (its supervisor fell silent):
    what it wrote after the abort's deletion goes when checkpoint 3 is stored, which every task
    acked after writing 2; files of an abort after 3 wait for a later one."""
    s = make(storage, n=2)
    write_files(storage, [private_file(2)])
    assert s.discard_aborted(CheckpointId(2)) == (private_file(2).path,)
    late = write_files(storage, [private_file(2, "late")])
    s.discard_aborted(CheckpointId(4))
    after = write_files(storage, [private_file(4, "late")])
    s.store_checkpoint(metadata(3, write_files(storage, [private_file(3)])), 3)
    assert s.swept == tuple(f.path for f in late) and not storage.exists(late[0].path)
    assert storage.exists(after[0].path), "checkpoint 4's tasks may still write: not before a later one is stored"
    s.store_checkpoint(metadata(5, write_files(storage, [private_file(5)])), 5)
    assert s.swept == tuple(f.path for f in after)
    s.store_checkpoint(metadata(6, write_files(storage, [private_file(6)])), 6)
    assert s.swept == (), "each aborted checkpoint is swept once"


def test_an_aborted_id_never_deletes_a_completed_checkpoint_the_store_does_not_know(storage) -> None:
    """A checkpoint copied in by hand may share its id with a checkpoint this store sees aborted;
    its ``_metadata`` marks it complete, so its directory is left alone (the other one is not)."""
    s = make(storage, n=2)
    copied = metadata(4, write_files(storage, [private_file(4)]))
    storage.write_bytes(f"{JOB}/chk-4/_metadata", encode_metadata(copied))
    aborted_savepoint = storage.write_bytes(f"{JOB}/savepoints/sp-4/state", b"x")
    assert s.discard_aborted(CheckpointId(4)) == (aborted_savepoint.path,)
    assert storage.exists(f"{JOB}/chk-4/_metadata") and storage.exists(private_file(4).path)


def test_a_checkpoint_discarded_by_request_leaves_retention_with_only_its_own_files(storage) -> None:
    """An operator discards the newest checkpoint (its _metadata corrupted): what to delete comes
    from the store's log, files the older checkpoint shares stay, and its id is never stored again."""
    s = make(storage, n=3)
    older = metadata(1, write_files(storage, [private_file(1), shared_file("a")]))
    newest = metadata(2, write_files(storage, [private_file(2), shared_file("a"), shared_file("b")]))
    s.store_checkpoint(older, 1)
    s.store_checkpoint(newest, 2)
    (storage.root / "job/chk-2/_metadata").write_bytes(b"corrupted")
    event = s.discard_by_request(CheckpointId(2), 10)
    assert event is not None and event.reason == "deleted by request"
    assert set(event.released_files) == {"job/chk-2/_metadata", private_file(2).path, shared_file("b").path}
    assert not any(storage.exists(p) for p in event.released_files)
    assert storage.exists(shared_file("a").path) and s.store.latest() == older
    assert s.discard_by_request(CheckpointId(2), 11) is None and s.discard_by_request(CheckpointId(7), 11) is None
    with pytest.raises(ValueError, match="already discarded"):
        s.store_checkpoint(newest, 12)
    rebuilt = PersistentCheckpointStore(JOB, storage, InMemoryCheckpointEventLog(), CheckpointStoreOptions(3))
    rebuilt.recover(s.event_log.events, 20)
    assert rebuilt.store.retained() == (older,)


def test_files_a_task_writes_after_the_abort_go_at_the_late_sweep_when_no_checkpoint_follows(storage) -> None:
    """A job stopped right after the abort (the stop aborts the checkpoint in flight while its
    workers finish their snapshots) stores no later checkpoint: the late sweep a while after the
    abort deletes what they wrote meanwhile; never a completed checkpoint's, nor one not aborted."""
    s = make(storage, n=2)
    s.discard_aborted(CheckpointId(2))
    late = write_files(storage, [private_file(2, "late")])
    pending = write_files(storage, [private_file(3)])
    assert s.sweep_late(CheckpointId(2)) == tuple(f.path for f in late) and not storage.exists(late[0].path)
    assert s.sweep_late(CheckpointId(3)) == () and storage.exists(pending[0].path)  # not aborted: may complete
    done = metadata(4, write_files(storage, [private_file(4)]))
    s.store_checkpoint(done, 4)
    assert s.sweep_late(CheckpointId(4)) == () and storage.exists(private_file(4).path)
