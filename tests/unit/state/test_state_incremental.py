"""Incremental RocksDB snapshots: only new SST files are uploaded; shared files are reused."""

from __future__ import annotations

from tidemark.protocol.messages import StateHandleKind
from tidemark.state import KeyGroupRange, ValueStateDescriptor
from tidemark.state.rocksdb.snapshot import upload_incremental
from tidemark.state.snapshot import state_meta


def fill(backend, keys, value) -> None:
    state = backend.get_state(ValueStateDescriptor("v"))
    for key in keys:
        backend.set_current_key(key)
        state.update(value(key))


def test_incremental_snapshot_uploads_only_new_files(new_backend, storage) -> None:
    backend = new_backend(kind="rocksdb")
    fill(backend, range(5000), lambda k: k)
    assert backend.settle()
    first = backend.snapshot(1, storage).handles[0]
    assert first.kind is StateHandleKind.KEYED_INCREMENTAL
    first_shared = {f.path for f in first.files if f.shared}
    assert first_shared and all(p.startswith("shared/operator/") for p in first_shared)
    assert backend.last_snapshot_stats.reused == ()

    fill(backend, range(10), lambda k: -k)  # a small change
    second = backend.snapshot(2, storage).handles[0]
    stats = backend.last_snapshot_stats
    second_shared = {f.path for f in second.files if f.shared}
    assert first_shared <= second_shared  # every old SST is referenced again...
    assert set(stats.reused) == first_shared  # ...and reported as reused, not re-uploaded
    new_shared = second_shared - first_shared
    assert len(new_shared) == 1
    assert set(stats.uploaded) == new_shared | {f.path for f in second.files if not f.shared}
    assert second.checkpointed_size_bytes < second.state_size_bytes
    assert stats.bytes_written == second.checkpointed_size_bytes


def test_restore_from_incremental_then_reuse_its_files(new_backend, storage) -> None:
    source = new_backend(kind="rocksdb")
    fill(source, range(3000), lambda k: str(k))
    snapshot = source.snapshot(1, storage)
    restored = new_backend(kind="rocksdb")
    restored.restore([snapshot], storage)
    state = restored.get_state(ValueStateDescriptor("v"))
    for key in (0, 1234, 2999):
        restored.set_current_key(key)
        assert state.value() == str(key)
    restored.set_current_key(5)
    state.update("changed")
    again = restored.snapshot(2, storage)
    assert set(restored.last_snapshot_stats.reused) == {f.path for f in snapshot.handles[0].files if f.shared}
    heap = new_backend(kind="heap")
    heap.restore([again], storage)
    heap.set_current_key(5)
    assert heap.get_state(ValueStateDescriptor("v")).value() == "changed"


def test_incremental_restore_clips_to_the_new_range(new_backend, storage) -> None:
    source = new_backend(kind="rocksdb")
    fill(source, range(2000), lambda k: k)
    snapshot = source.snapshot(1, storage)
    half = new_backend(KeyGroupRange(0, 63), kind="rocksdb")
    half.restore([snapshot], storage)
    half.get_state(ValueStateDescriptor("v"))
    groups = {int.from_bytes(k[:2], "big") for k in half._cfs["v"].keys()}
    assert groups and max(groups) <= 63


def test_a_defined_state_without_data_restores_into_every_backend(new_backend, storage) -> None:
    """A state known only by its definition (registered, or read from a changelog's state
    metadata) has no column family yet; its incremental snapshot still restores everywhere."""
    source = new_backend(kind="rocksdb")
    fill(source, range(100), lambda k: k)
    source.get_state(ValueStateDescriptor("registered-only"))
    source.restore_state_metas([state_meta(ValueStateDescriptor("logged-only"))], "changelog")
    snapshot = source.snapshot(1, storage)
    for kind in ("heap", "rocksdb"):
        restored = new_backend(kind=kind)
        restored.restore([snapshot], storage)
        restored.set_current_key(7)
        assert restored.get_state(ValueStateDescriptor("v")).value() == 7
        assert restored.get_state(ValueStateDescriptor("registered-only")).value() is None
        assert restored.get_state(ValueStateDescriptor("logged-only")).value() is None


def test_a_checkpoint_after_a_rescaled_restore_names_every_file_where_the_store_finds_it() -> None:
    """A backend restored from another range keeps the base's SST files; its next incremental
    checkpoint lists them at their root-relative paths (not the backend's own ``shared/...``)."""
    from tidemark.api import KeyedProcessFunction
    from tidemark.state import ValueStateDescriptor
    from tidemark.testing import KeyedProcessFunctionHarness

    class Count(KeyedProcessFunction):
        def open(self, ctx):  # type: ignore[no-untyped-def]
            self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

        def process(self, value, ctx):  # type: ignore[no-untyped-def]
            self.count.update(self.count.value() + 1)

    def harness(parallelism: int, **options):  # type: ignore[no-untyped-def]
        return KeyedProcessFunctionHarness.for_function(Count, lambda v: v, parallelism=parallelism,
                                                        state_backend="rocksdb", **options)

    with harness(2) as first:
        first.process_all(f"k{i}" for i in range(50))
        checkpoint = first.snapshot(savepoint=False)
    with harness(3, storage=checkpoint.storage).restore(checkpoint) as rescaled:
        after = rescaled.snapshot(checkpoint_id=2, savepoint=False)
    files = [f for t in after.metadata.tasks for h in t.state_handles for f in h.files]
    assert any(f.shared for f in files)
    assert [f.path for f in files if not after.storage.exists(f.path)] == []


def test_checkpoints_whose_capture_undid_changes_restore_each_to_its_barrier(new_backend, storage,
                                                                             capture_held) -> None:
    """Consecutive checkpoints, each with changes made before its capture was taken: each restores
    to the state at its own barrier, the files the next ones share included."""
    backend = new_backend(kind="rocksdb")
    model: dict[int, object] = {}
    snapshots, expected = [], []

    def write(keys, value) -> None:
        fill(backend, keys, value)
        model.update((k, value(k)) for k in keys)

    for round_ in range(6):
        write(range(round_ * 100, round_ * 100 + 500), lambda k: (round_, k))
        pending = backend.snapshot_async(round_ + 1, storage)
        expected.append(dict(model))
        write(range(0, round_ * 100 + 600, 3), lambda k: f"after {round_}")  # undone in the checkpoint
        capture_held.set()
        snapshots.append(pending.run())
        capture_held.clear()
        backend.notify_checkpoint_complete(round_ + 1)
        assert backend.settle()
    for snapshot, values in zip(snapshots, expected):
        restored = new_backend(kind="rocksdb")
        restored.restore([snapshot], storage)
        state = restored.get_state(ValueStateDescriptor("v"))
        seen = {}
        for key in range(1200):
            restored.set_current_key(key)
            if (value := state.value()) is not None:
                seen[key] = value
        assert seen == values


def test_an_sst_file_of_a_checkpoints_own_copy_is_never_taken_for_the_live_databases(storage, tmp_path) -> None:
    """The pre-images' SST file is numbered as the live database numbers its next files: a later
    checkpoint's live file of the same name is uploaded, not taken for the copy's."""
    uploaded: dict = {}
    refs = []
    for n, content in enumerate((b"the copy's own pre-images", b"the live database's later file")):
        local = tmp_path / f"chk-{n}"
        local.mkdir()
        (local / "000017.sst").write_bytes(content)
        (local / "CURRENT").write_bytes(b"MANIFEST-000001\n")
        files, _ = upload_incremental(local, storage, f"op/chk-{n}", "shared/op", {"states": []}, uploaded,
                                      own={"000017.sst"} if n == 0 else ())
        (ref,) = [f for f in files if f.shared]
        refs.append(ref)
    assert storage.read_verified(refs[1]) == b"the live database's later file"
    assert "000017.sst" in uploaded and uploaded["000017.sst"] == refs[1]
