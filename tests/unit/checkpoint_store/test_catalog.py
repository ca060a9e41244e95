"""The storage catalog behind the API: retained checkpoints and savepoints read from real
``_metadata`` files on filesystem storage, and the restore source a request names."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.checkpoint_store import encode_metadata, metadata_path
from tidemark.checkpoint_store.catalog import (
    RestoreSourceNotFound,
    UnusableRestoreSource,
    check_savepoint_target,
    job_in_storage,
    list_retained,
    resolve_restore_source,
)
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
from tidemark.storage import InvalidStoragePath, TargetConflict
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId, KeyGroup, OperatorId, TaskId

JOB = JobId("orders")


def metadata(cid: int, kind: CheckpointType = CheckpointType.CHECKPOINT, job: JobId = JOB) -> CheckpointMetadata:
    task = TaskSnapshot(TaskId("counts#0"), OperatorId("counts"), 0, KeyGroup(0), KeyGroup(127))
    return CheckpointMetadata(job_id=job, checkpoint_id=CheckpointId(cid), checkpoint_type=kind,
                              triggered_at=1000 * cid, completed_at=1000 * cid + 250, max_parallelism=128,
                              tasks=(task,), epoch=Epoch(1), state_size_bytes=900 + cid,
                              checkpointed_size_bytes=100 + cid)


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    store = FilesystemCheckpointStorage(tmp_path / "root")
    for cid, kind in [(3, CheckpointType.CHECKPOINT), (5, CheckpointType.SAVEPOINT),
                      (4, CheckpointType.CHECKPOINT), (7, CheckpointType.STOP_WITH_SAVEPOINT)]:
        store.write_bytes(metadata_path(JOB, CheckpointId(cid), kind), encode_metadata(metadata(cid, kind)))
    store.write_bytes(f"{JOB}/chk-4/counts-0.state", b"state")
    store.write_bytes(f"{JOB}/shared/abc.sst", b"shared")
    store.write_bytes("orders-eu/chk-9/_metadata", encode_metadata(metadata(9, job=JobId("orders-eu"))))
    return store


def test_lists_checkpoints_and_savepoints_apart_by_id(storage: FilesystemCheckpointStorage) -> None:
    checkpoints = list_retained(storage, JOB, savepoints=False)
    assert [(e.path, e.metadata.checkpoint_id) for e in checkpoints.entries] == [
        ("orders/chk-3/_metadata", 3), ("orders/chk-4/_metadata", 4)]
    assert checkpoints.entries[1].metadata.checkpointed_size_bytes == 104
    savepoints = list_retained(storage, JOB, savepoints=True)
    assert [(e.path, e.metadata.checkpoint_type) for e in savepoints.entries] == [
        ("orders/savepoints/sp-5/_metadata", CheckpointType.SAVEPOINT),
        ("orders/savepoints/sp-7/_metadata", CheckpointType.STOP_WITH_SAVEPOINT)]
    assert not checkpoints.unreadable and not savepoints.unreadable


def test_a_job_whose_name_prefixes_another_sees_only_its_own(storage: FilesystemCheckpointStorage) -> None:
    assert [e.metadata.checkpoint_id for e in list_retained(storage, JobId("orders-eu"), savepoints=False).entries] == [9]
    assert list_retained(storage, JobId("orders-e"), savepoints=False).entries == ()
    assert job_in_storage(storage, JOB) and not job_in_storage(storage, JobId("orders-e"))


def test_corrupt_metadata_is_reported_not_hidden(storage: FilesystemCheckpointStorage) -> None:
    storage.write_bytes(f"{JOB}/chk-8/_metadata", b"\x00not avro at all")
    listing = list_retained(storage, JOB, savepoints=False)
    assert [e.metadata.checkpoint_id for e in listing.entries] == [3, 4]
    assert listing.unreadable == ("orders/chk-8/_metadata",)
    with pytest.raises(UnusableRestoreSource, match="not a checkpoint metadata file"):
        resolve_restore_source(storage, JOB, CheckpointId(8), None)


def test_restore_source_by_id_finds_checkpoints_and_savepoints(storage: FilesystemCheckpointStorage) -> None:
    assert resolve_restore_source(storage, JOB, CheckpointId(4), None).path == "orders/chk-4/_metadata"
    found = resolve_restore_source(storage, JOB, CheckpointId(5), None)
    assert found.path == "orders/savepoints/sp-5/_metadata" and found.metadata.checkpoint_id == 5
    with pytest.raises(RestoreSourceNotFound, match="no retained checkpoint or savepoint 6"):
        resolve_restore_source(storage, JOB, CheckpointId(6), None)


def test_restore_source_by_path(storage: FilesystemCheckpointStorage) -> None:
    found = resolve_restore_source(storage, JOB, None, "orders/savepoints/sp-7/_metadata")
    assert found.metadata.checkpoint_type is CheckpointType.STOP_WITH_SAVEPOINT
    with pytest.raises(RestoreSourceNotFound, match="no checkpoint or savepoint metadata"):
        resolve_restore_source(storage, JOB, None, "orders/savepoints/sp-99/_metadata")
    with pytest.raises(UnusableRestoreSource, match="belongs to job 'orders-eu'"):
        resolve_restore_source(storage, JOB, None, "orders-eu/chk-9/_metadata")
    with pytest.raises(UnusableRestoreSource):
        resolve_restore_source(storage, JOB, None, "orders/chk-4/counts-0.state")


def test_storage_refuses_paths_escaping_its_root(storage: FilesystemCheckpointStorage, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "_metadata").write_bytes(encode_metadata(metadata(1)))
    (storage.root / JOB / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidStoragePath, match="escapes the root"):
        resolve_restore_source(storage, JOB, None, "orders/link/_metadata")
    for path in ("../outside/_metadata", "/etc/passwd"):
        with pytest.raises(InvalidStoragePath):
            resolve_restore_source(storage, JOB, None, path)


def test_a_savepoint_target_must_be_a_free_place_in_the_jobs_savepoint_area(
        storage: FilesystemCheckpointStorage) -> None:
    check_savepoint_target(storage, JOB, f"{JOB}/savepoints/before-upgrade")
    check_savepoint_target(storage, JOB, f"{JOB}/savepoints/sp-6")  # a directory of no savepoint (yet)
    storage.write_bytes(f"{JOB}/savepoints/kept/counts/chk-9/op-0.tmos", b"state")
    check_savepoint_target(storage, JOB, f"{JOB}/savepoints/kept")  # files of an earlier target: names differ
    for outside in (f"{JOB}/chk-3", f"{JOB}/savepoints", "orders-eu/savepoints/x", f"{JOB}/savepointsx/y"):
        with pytest.raises(InvalidStoragePath, match="inside the job's savepoint area 'orders/savepoints/'"):
            check_savepoint_target(storage, JOB, outside)
    taken = {f"{JOB}/savepoints/sp-5": "is an existing savepoint",
             f"{JOB}/savepoints/sp-5/deeper": "lies inside 'orders/savepoints/sp-5', an existing savepoint",
             f"{JOB}/savepoints/sp-5/_metadata": "'orders/savepoints/sp-5/_metadata' is an existing file",
             f"{JOB}/savepoints/sp-5/_metadata/x": "lies under 'orders/savepoints/sp-5/_metadata', an existing file"}
    for target, why in taken.items():
        with pytest.raises(TargetConflict, match=why):
            check_savepoint_target(storage, JOB, target)
