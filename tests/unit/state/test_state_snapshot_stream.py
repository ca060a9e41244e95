"""A canonical snapshot read from a file a chunk at a time reads as the one parsed in memory, and
a backend's canonical state read in place holds what its canonical snapshot holds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tidemark.state import KeyGroupRange, ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tidemark.state import snapshot as snapshot_format
from tidemark.state.snapshot import HeaderSink, SnapshotFormatError, SnapshotReader

BIG = "x" * 5000  # one value larger than the chunks of the small-chunk reads below


def canonical_file(backend, storage) -> Path:
    """A backend with values, lists, maps and timers, snapshotted canonically: its one file."""
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    table = backend.get_state(MapStateDescriptor("m"))
    timers = backend.timer_queue("event")
    for key in range(300):
        backend.set_current_key(f"k{key}")
        value.update(BIG if key == 7 else key)
        items.add_all([key, key + 1])
        table.put(f"u{key}", key * 2)
        timers.add(1000 + key)
    (handle,) = backend.snapshot(1, storage, canonical=True).handles
    (ref,) = handle.files
    return storage.root / ref.path


@pytest.fixture(params=["heap", "rocksdb"])
def snapshot_path(request, new_backend, storage) -> Path:
    return canonical_file(new_backend(kind=request.param), storage)


@pytest.mark.parametrize("chunk", [7, 1 << 20])
@pytest.mark.parametrize("key_groups", [None, KeyGroupRange(10, 70)])
def test_a_file_read_in_chunks_yields_the_entries_parsed_in_memory(snapshot_path, monkeypatch, chunk,
                                                                   key_groups) -> None:
    monkeypatch.setattr(snapshot_format, "CHUNK", chunk)
    in_memory = SnapshotReader.parse(snapshot_path.read_bytes(), "mem")
    streamed = SnapshotReader.open(snapshot_path, "file")
    assert streamed.header == in_memory.header and streamed.states == in_memory.states
    expected = list(in_memory.entries(key_groups))
    assert list(streamed.entries(key_groups)) == expected
    assert list(streamed.entries(key_groups)) == expected  # each call reads the file again
    if key_groups is None:  # every entry, the big value among them
        assert len(expected) > 900 and any(len(e.value) > 5000 for e in expected)


def test_a_flipped_byte_fails_the_checksum_before_any_entry(snapshot_path) -> None:
    data = bytearray(snapshot_path.read_bytes())
    data[len(data) // 2] ^= 0x01
    snapshot_path.write_bytes(bytes(data))
    with pytest.raises(SnapshotFormatError, match="file: snapshot checksum mismatch"):
        SnapshotReader.open(snapshot_path, "file")


@pytest.mark.parametrize("keep", ["20 bytes", "half", "all but the last byte"])
def test_a_truncated_file_is_refused(snapshot_path, keep) -> None:
    data = snapshot_path.read_bytes()
    snapshot_path.write_bytes(data[: {"20 bytes": 20, "half": len(data) // 2, "all but the last byte": -1}[keep]])
    with pytest.raises(SnapshotFormatError, match="file: (snapshot checksum mismatch|not a canonical)"):
        SnapshotReader.open(snapshot_path, "file")


def test_entries_cut_short_under_a_valid_checksum_are_refused(snapshot_path, monkeypatch) -> None:
    monkeypatch.setattr(snapshot_format, "CHUNK", 64)
    body = snapshot_path.read_bytes()[:-32]
    cut = body[: len(body) // 2]  # no end marker: the file ends inside the entries
    snapshot_path.write_bytes(cut + hashlib.sha256(cut).digest())
    reader = SnapshotReader.open(snapshot_path, "file")
    with pytest.raises(SnapshotFormatError, match="file: (truncated snapshot entry|bad entry marker)"):
        list(reader.entries())


def test_the_header_sink_keeps_only_the_header(snapshot_path) -> None:
    data = snapshot_path.read_bytes()
    sink = HeaderSink()
    for start in range(0, len(data), 5):
        assert sink.write(data[start : start + 5]) == len(data[start : start + 5])
    assert sink.header("file") == SnapshotReader.parse(data, "mem").header
    assert len(sink._head) < 1000
    with pytest.raises(SnapshotFormatError, match="not a canonical"):
        HeaderSink().header("empty")


@pytest.mark.parametrize("kind", ["heap", "rocksdb"])
def test_the_canonical_state_read_in_place_is_the_canonical_snapshots(new_backend, storage, kind) -> None:
    backend = new_backend(kind=kind)
    path = canonical_file(backend, storage)
    metas, entries = backend.canonical_state()
    written = SnapshotReader.parse(path.read_bytes(), "mem")
    assert metas == written.states
    assert sorted(entries, key=repr) == sorted(written.entries(), key=repr)
