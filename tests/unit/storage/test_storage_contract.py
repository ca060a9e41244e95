"""Contract suite for every CheckpointStorage implementation (add new ones to IMPLEMENTATIONS)."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

import pytest

from tidemark.protocol.messages import StateFile
from tidemark.storage import UnknownStorageScheme, open_storage, register_scheme
from tidemark.storage.base import CheckpointStorage, CorruptStateFile, InvalidStoragePath, TargetConflict
from tidemark.storage.filesystem import FilesystemCheckpointStorage


def filesystem(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    return open_storage((tmp_path / "root").as_uri())


def s3(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    """A fresh bucket on a real moto S3 server (fixtures in tests/integration/storage)."""
    return open_storage(f"s3://{request.getfixturevalue('s3_bucket')}/root")


IMPLEMENTATIONS = {"filesystem": filesystem, "s3": s3}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStorage:
    return IMPLEMENTATIONS[request.param](request, tmp_path)


def test_is_a_checkpoint_storage(storage) -> None:
    assert isinstance(storage, CheckpointStorage)


def test_write_read_round_trip_with_sha256(storage) -> None:
    data = os.urandom(3000)
    ref = storage.write_bytes("job/chk-1/a.bin", data)
    assert ref == StateFile("job/chk-1/a.bin", 3000, hashlib.sha256(data).hexdigest(), False)
    assert storage.read_bytes("job/chk-1/a.bin") == data
    assert storage.read_verified(ref) == data
    assert storage.exists("job/chk-1/a.bin") and not storage.exists("job/chk-1/b.bin")


def test_a_file_is_located_where_a_write_there_names_it_also_through_a_view(storage) -> None:
    from tidemark.storage.scoped import SnapshotStorage

    ref = storage.write_bytes("job/shared/op/x.sst", b"x", shared=True)
    assert storage.located("job/shared/op/x.sst") == ref.path
    view = SnapshotStorage(storage, "job/chk-2/op", "job/shared/op")
    assert view.exists("shared/x.sst") and view.located("shared/x.sst") == ref.path
    assert view.write_bytes("y.bin", b"y").path == view.located("y.bin") == "job/chk-2/op/y.bin"


def test_write_from_streams_and_marks_shared(storage) -> None:
    data = os.urandom((1 << 20) * 2 + 17)
    ref = storage.write_from("shared/x.sst", io.BytesIO(data), shared=True)
    assert ref.shared and ref.size_bytes == len(data)
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert storage.read_verified(ref) == data


def test_overwrite_is_atomic_replacement(storage) -> None:
    storage.write_bytes("f", b"old")
    storage.write_bytes("f", b"new")
    assert storage.read_bytes("f") == b"new"
    assert list(storage.list()) == ["f"]  # no temporary files are visible


def test_read_verified_refuses_mismatches_naming_the_file(storage) -> None:
    ref = storage.write_bytes("d/file.bin", b"payload")
    with pytest.raises(CorruptStateFile, match="d/file.bin"):
        storage.read_verified(StateFile(ref.path, ref.size_bytes, "0" * 64))
    with pytest.raises(CorruptStateFile, match="d/file.bin"):
        storage.read_verified(StateFile(ref.path, ref.size_bytes + 1, ref.sha256))


def test_read_verified_into_streams_the_content_and_refuses_mismatches(storage) -> None:
    data = os.urandom((1 << 20) * 2 + 17)  # more than one chunk
    ref = storage.write_bytes("d/big.bin", data)
    out = io.BytesIO()
    storage.read_verified_into(ref, out)
    assert out.getvalue() == data
    for wrong in (StateFile(ref.path, ref.size_bytes, "0" * 64), StateFile(ref.path, ref.size_bytes - 1, ref.sha256)):
        with pytest.raises(CorruptStateFile, match="d/big.bin"):
            storage.read_verified_into(wrong, io.BytesIO())
    with pytest.raises(FileNotFoundError):
        storage.read_verified_into(StateFile("d/none.bin", 1, "0" * 64), io.BytesIO())


def test_missing_file_and_idempotent_delete(storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("nope")
    storage.write_bytes("a/b", b"1")
    storage.delete("a/b")
    storage.delete("a/b")
    assert not storage.exists("a/b")


def test_list_by_prefix(storage) -> None:
    for path in ("op/chk-1/a", "op/chk-1/b", "op/chk-10/a", "shared/op/x.sst"):
        storage.write_bytes(path, b"x")
    assert list(storage.list("op/chk-1/")) == ["op/chk-1/a", "op/chk-1/b"]
    assert list(storage.list("op/chk-1")) == ["op/chk-1/a", "op/chk-1/b", "op/chk-10/a"]
    assert len(list(storage.list())) == 4
    assert list(storage.list("missing/")) == []


@pytest.mark.parametrize("bad", ["/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "", "a\\b",
                                 "a\x00b", "a/.."])
def test_invalid_paths_are_refused(storage, bad: str) -> None:
    for call in (lambda: storage.write_bytes(bad, b"x"), lambda: storage.read_bytes(bad),
                 lambda: storage.exists(bad), lambda: storage.delete(bad)):
        with pytest.raises(InvalidStoragePath):
            call()


def test_check_target_refuses_a_directory_taken_by_a_file(storage) -> None:
    storage.write_bytes("job/savepoints/sp-1/_metadata", b"m")
    storage.check_target("job/savepoints/sp-1")  # an existing directory
    storage.check_target("job/savepoints/new/deeper")  # not there yet
    with pytest.raises(TargetConflict, match="^'job/savepoints/sp-1/_metadata' is an existing file, not a dir"):
        storage.check_target("job/savepoints/sp-1/_metadata")
    with pytest.raises(TargetConflict, match="^'job/savepoints/sp-1/_metadata/a' lies under "
                                             "'job/savepoints/sp-1/_metadata', an existing file$"):
        storage.check_target("job/savepoints/sp-1/_metadata/a")
    for bad in ("../x", "job/./x", "/job"):
        with pytest.raises(InvalidStoragePath):
            storage.check_target(bad)


def test_concurrent_writers(storage) -> None:
    def write(i: int) -> None:
        for j in range(20):
            storage.write_bytes(f"t/{i}/{j}", bytes([i, j]) * 100)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(list(storage.list("t/"))) == 80


# ------------------------------------------------------------------ filesystem specifics


def test_symlink_escape_is_refused(tmp_path: Path) -> None:
    storage = FilesystemCheckpointStorage(tmp_path / "root")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (tmp_path / "root" / "link").symlink_to(outside, target_is_directory=True)
    with pytest.raises(InvalidStoragePath):
        storage.read_bytes("link/secret")
    with pytest.raises(InvalidStoragePath):
        storage.write_bytes("link/new", b"x")
    assert not (outside / "new").exists()


def test_check_target_refuses_any_symlink_on_the_way(tmp_path: Path) -> None:
    """Inside the root or out of it: a write would follow it somewhere the path does not say."""
    storage = FilesystemCheckpointStorage(tmp_path / "root")
    area = tmp_path / "root" / "job" / "savepoints"
    (area / "real").mkdir(parents=True)
    (area / "inside").symlink_to(area / "real", target_is_directory=True)
    (area / "outside").symlink_to(tmp_path, target_is_directory=True)
    (area / "dangling").symlink_to(tmp_path / "nothing")
    for name in ("inside", "outside", "dangling"):
        with pytest.raises(TargetConflict, match=f"^'job/savepoints/{name}' is a symlink$"):
            storage.check_target(f"job/savepoints/{name}")
        with pytest.raises(TargetConflict, match=f"passes through the symlink 'job/savepoints/{name}'$"):
            storage.check_target(f"job/savepoints/{name}/below")
    storage.check_target("job/savepoints/real/below")


@pytest.mark.parametrize("error", [OSError("disk on fire"), SystemExit(143)])
def test_failed_write_leaves_nothing(tmp_path: Path, error: BaseException) -> None:
    """Not the file, not its temporary file, not the directories made for it (an exit on SIGTERM
    in the middle of a snapshot's write leaves no empty checkpoint directory behind)."""
    storage = FilesystemCheckpointStorage(tmp_path / "root")
    storage.write_bytes("job/kept", b"x")

    class Broken(io.RawIOBase):
        def read(self, size: int = -1) -> bytes:
            raise error

    with pytest.raises(type(error)):
        storage.write_from("job/chk-7/stage/chk-7/op-0", Broken())  # type: ignore[arg-type]
    assert not storage.exists("job/chk-7/stage/chk-7/op-0")
    assert os.listdir(tmp_path / "root" / "job") == ["kept"]


def test_registry(tmp_path: Path) -> None:
    with pytest.raises(UnknownStorageScheme, match="gs"):
        open_storage("gs://bucket/prefix")
    with pytest.raises(ValueError):
        open_storage("file://remotehost/x")
    register_scheme("memtest", lambda url: FilesystemCheckpointStorage(tmp_path / "m"))
    assert isinstance(open_storage("memtest://anything"), FilesystemCheckpointStorage)
    storage = open_storage((tmp_path / "with space").as_uri())
    assert storage.root == (tmp_path / "with space").resolve()
