"""Corruption is detected everywhere: the ``_metadata`` checksum (format 2, format 1 still read),
every state file on verification, and the failover's choice of restore source."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import JOB, metadata, private_file, shared_file, write_files

from tidemark.checkpoint_store import InMemoryCheckpointEventLog, MetadataFormatError, PersistentCheckpointStore
from tidemark.checkpoint_store.metadata_codec import FORMAT_TAG, CorruptMetadata, decode_metadata, encode_metadata
from tidemark.checkpoint_store.store import CheckpointStoreOptions
from tidemark.checkpoint_store.verification import CorruptCheckpoint, verify_checkpoint
from tidemark.protocol.codec import Codec
from tidemark.api import JobSpec, KeyedProcessFunction, Stage
from tidemark.runtime.supervisor.restore_source import (
    RestoreRefused,
    choose_restore_source,
    refuse_below_committed_output,
)
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId, CheckpointingMode


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    return FilesystemCheckpointStorage(tmp_path / "checkpoints")


def test_every_single_bit_flip_of_a_metadata_file_is_detected() -> None:
    data = encode_metadata(metadata(7, [private_file(7), shared_file("a")]))
    assert data.startswith(FORMAT_TAG)
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(MetadataFormatError):
            decode_metadata(bytes(flipped))


def test_changed_bytes_fail_on_the_checksum_and_format_1_files_still_load() -> None:
    m = metadata(3, [private_file(3)])
    data = bytearray(encode_metadata(m))
    data[-5:-1] = b"\x00\x00\x00\x00"
    with pytest.raises(CorruptMetadata, match="checksum mismatch"):
        decode_metadata(bytes(data))
    legacy = Codec.local().encode(m)  # what _metadata held before the checksum was added
    assert decode_metadata(legacy) == m


def _job() -> JobSpec:
    class Nothing(KeyedProcessFunction):
        def process(self, value, ctx):  # noqa: ANN001
            pass

    return JobSpec(JOB, (Stage("agg", ("in",), str, Nothing, "out"),), mode=CheckpointingMode.EXACTLY_ONCE)


def _store_checkpoints(storage: FilesystemCheckpointStorage, ids: list[int]) -> PersistentCheckpointStore:
    store = PersistentCheckpointStore(JOB, storage, InMemoryCheckpointEventLog(),
                                      CheckpointStoreOptions(retained_checkpoints=len(ids)))
    for checkpoint_id in ids:
        files = write_files(storage, [private_file(checkpoint_id, "a"), private_file(checkpoint_id, "b")])
        store.store_checkpoint(metadata(checkpoint_id, files), checkpoint_id)
    return store


CORRUPTIONS = {
    "state file bytes": lambda root: _rewrite(root / "job/chk-2/a", lambda d: b"X" + d[1:]),
    "truncated state file": lambda root: _rewrite(root / "job/chk-2/b", lambda d: d[:-2]),
    "missing state file": lambda root: (root / "job/chk-2/a").unlink(),
    "metadata bytes": lambda root: _rewrite(root / "job/chk-2/_metadata", lambda d: d[:60] + b"\xff" * 8 + d[68:]),
    "one bit in metadata": lambda root: _rewrite(root / "job/chk-2/_metadata",
                                                 lambda d: d[:-7] + bytes([d[-7] ^ 0x04]) + d[-6:]),
}
FILES = {"state file bytes": "job/chk-2/a", "truncated state file": "job/chk-2/b", "missing state file": "job/chk-2/a",
         "metadata bytes": "job/chk-2/_metadata", "one bit in metadata": "job/chk-2/_metadata"}


def _rewrite(path: Path, change) -> None:  # noqa: ANN001
    path.write_bytes(change(path.read_bytes()))


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_each_corruption_is_named_by_checkpoint_and_file(storage, tmp_path, corruption) -> None:
    _store_checkpoints(storage, [1, 2])
    assert verify_checkpoint(storage, "job/chk-2/_metadata").checkpoint_id == 2
    CORRUPTIONS[corruption](tmp_path / "checkpoints")
    with pytest.raises(CorruptCheckpoint) as caught:
        verify_checkpoint(storage, "job/chk-2/_metadata")
    assert (caught.value.checkpoint_id, caught.value.file) == (2, FILES[corruption])
    assert str(caught.value).startswith(f"checkpoint 2 is corrupted: {FILES[corruption]}: ")
    verify_checkpoint(storage, "job/chk-1/_metadata")  # the older one is whole


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_corrupted_newest_checkpoint_stops_the_failover_instead_of_falling_back(storage, tmp_path,
                                                                                 corruption) -> None:
    _store_checkpoints(storage, [1, 2])
    CORRUPTIONS[corruption](tmp_path / "checkpoints")
    asked: list[int] = []

    def committed() -> int:
        asked.append(1)
        return 2

    with pytest.raises(RestoreRefused, match=rf"checkpoint 2 is corrupted: {FILES[corruption]}: .*TIDEMARK_RESTORE"):
        choose_restore_source(storage, _job(), baseline=0, started_from=None, allow_fallback=False,
                              committed_up_to=committed)
    assert asked == []  # without a fallback the output is not even looked at


def test_an_allowed_fallback_is_taken_only_when_no_newer_output_is_committed(storage, tmp_path) -> None:
    _store_checkpoints(storage, [1, 2, 3])
    CORRUPTIONS["one bit in metadata"](tmp_path / "checkpoints")  # chk-2
    _rewrite(tmp_path / "checkpoints/job/chk-3/a", lambda d: d[:-1] + b"!")
    choose = lambda committed: choose_restore_source(  # noqa: E731
        storage, _job(), baseline=0, started_from=None, allow_fallback=True, committed_up_to=lambda: committed)
    source = choose(1)
    assert source.checkpoint_id == 1 and source.fallback_from is not None
    assert source.fallback_from.checkpoint_id == 3  # the newest is the one reported
    with pytest.raises(RestoreRefused, match="Falling back to checkpoint 1 is refused: the output of checkpoint 2"):
        choose(2)
    source = choose_restore_source(storage, _job(), baseline=0, started_from=None, allow_fallback=True,
                                   committed_up_to=lambda: 0)
    assert source.checkpoint_id == 1


def test_a_whole_newest_checkpoint_is_chosen_and_checkpoints_before_the_run_are_not(storage) -> None:
    _store_checkpoints(storage, [1, 2])
    source = choose_restore_source(storage, _job(), baseline=0, started_from=None, allow_fallback=False,
                                   committed_up_to=lambda: 0)
    assert (source.checkpoint_id, source.fallback_from) == (2, None)
    source = choose_restore_source(storage, _job(), baseline=2, started_from=None, allow_fallback=False,
                                   committed_up_to=lambda: 0)
    assert (source.checkpoint_id, source.path) == (None, None)  # nothing of this run: start over


@pytest.mark.parametrize("corruption", ["one bit in metadata", "missing state file"])
def test_after_the_corrupted_newest_is_discarded_the_newest_left_is_chosen_unless_newer_output_is_committed(
        storage, tmp_path, corruption) -> None:
    """The operator's recovery (``tidemark checkpoints discard``): once the store discarded the
    corrupted checkpoint 2, checkpoint 1 is chosen without any fallback, and restoring it is
    refused in one line when the markers show checkpoint 2's output committed."""
    store = _store_checkpoints(storage, [1, 2])
    CORRUPTIONS[corruption](tmp_path / "checkpoints")
    assert store.discard_by_request(CheckpointId(2), 10) is not None
    source = choose_restore_source(storage, _job(), baseline=0, started_from=None, allow_fallback=False,
                                   committed_up_to=lambda: 2)
    assert source.checkpoint_id == 1 and source.fallback_from is None
    skipped = "checkpoint 2 of job job was discarded"
    refuse_below_committed_output(_job(), skipped, 1, lambda: 1)  # its output is not committed: restored
    with pytest.raises(RestoreRefused) as refused:
        refuse_below_committed_output(_job(), skipped, 1, lambda: 2, remedy="; pass --force")
    assert str(refused.value) == (f"{skipped}. Falling back to checkpoint 1 is refused: the output of checkpoint 2 "
                                  "is committed already, and restoring an older state would commit it again; "
                                  "pass --force")
