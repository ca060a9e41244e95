"""RocksDB configuration: the predefined profiles, a job's options factory per state (one column
family each), and the memory budget the databases of a worker share."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from tidemark.api import RocksDBConfig, RocksDBProfile, StateBackendKind
from tidemark.examples.access_log import url_counts
from tidemark.examples.generator import generate
from tidemark.state import KeyGroupRange, MapStateDescriptor, RocksDBStateBackend, ValueStateDescriptor
from tidemark.state.rocksdb.options import PROFILES, RocksDBMemory, profile_options
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.testing import KeyedProcessFunctionHarness
from tidemark.types import CheckpointId

KEY_GROUPS = KeyGroupRange(0, 127)


def _backend(path: Path, **kwargs) -> RocksDBStateBackend:
    return RocksDBStateBackend(path, KEY_GROUPS, 128, **kwargs)


def test_every_profile_of_the_api_is_defined_and_another_name_is_refused_naming_them() -> None:
    assert {profile.value for profile in RocksDBProfile} == set(PROFILES)
    assert profile_options("spinning-disk-high-memory").block_bytes == 128 << 10
    with pytest.raises(ValueError, match="unknown RocksDB profile 'ssd'; profiles: \\['default', 'flash-ssd'"):
        profile_options("ssd")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_backend_on_each_profile_writes_snapshots_and_restores(tmp_path, profile) -> None:
    storage = FilesystemCheckpointStorage(tmp_path / "checkpoints")
    options = profile_options(profile)
    with _backend(tmp_path / "a", options=options) as source:
        counts = source.get_state(ValueStateDescriptor("count", default=0))
        for key in range(500):
            source.set_current_key(key)
            counts.update(key * 2)
        snapshot = source.snapshot(CheckpointId(1), storage)
    with _backend(tmp_path / "b", options=options) as target:
        target.restore([snapshot], storage)
        counts = target.get_state(ValueStateDescriptor("count", default=0))
        for key in (0, 17, 499):
            target.set_current_key(key)
            assert counts.value() == key * 2


def test_the_options_factory_tunes_each_state_s_column_family_also_after_a_restore(tmp_path) -> None:
    """A 64 KB write buffer for the state "big" only: its writes reach SST files while "small",
    on the default 16 MB buffer, stays in its memtable; a restored database's families get the
    factory's options again."""
    calls: list[str] = []

    def factory(state: str, options) -> None:
        calls.append(state)
        if state == "big":
            options.set_write_buffer_size(64 << 10)

    storage = FilesystemCheckpointStorage(tmp_path / "checkpoints")
    with _backend(tmp_path / "a", options_factory=factory) as backend:
        big = backend.get_state(MapStateDescriptor("big"))
        small = backend.get_state(MapStateDescriptor("small"))
        for key in range(200):
            backend.set_current_key(key)
            big.put_all({n: "x" * 100 for n in range(20)})
            small.put_all({n: "x" * 100 for n in range(20)})
        deadline = time.monotonic() + 30
        while backend.size().states["big"].live_sst_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # flushes run in the background
        sizes = backend.size().states
        assert sizes["big"].live_sst_bytes > 0 and sizes["small"].live_sst_bytes == 0, sizes
        assert sorted(set(calls)) == ["big", "small"]
        snapshot = backend.snapshot(CheckpointId(1), storage)
    calls.clear()
    with _backend(tmp_path / "b", options_factory=factory) as restored:
        restored.restore([snapshot], storage)
        assert {"big", "small"} <= set(calls)


def test_databases_sharing_a_memory_budget_share_one_cache_and_stay_within_it(tmp_path) -> None:
    memory = RocksDBMemory.budget(8 << 20)
    backends = [_backend(tmp_path / f"task-{n}", memory=memory) for n in range(4)]
    alone = _backend(tmp_path / "alone")
    try:
        for backend in backends:
            state = backend.get_state(ValueStateDescriptor("v"))
            for key in range(5_000):
                backend.set_current_key(key)
                state.update(["y" * 200])  # a list goes to RocksDB at once (a string waits in the write buffer)
        caches = {backend.size().block_cache for backend in backends}
        assert len(caches) == 1 and alone.size().block_cache not in caches
        assert 0 < memory.usage() <= memory.cache_bytes * 1.05  # the memtables are charged to it
    finally:
        for backend in [*backends, alone]:
            backend.close()


def test_the_harness_builds_a_job_s_rocksdb_state_with_its_profile_and_options_factory() -> None:
    seen: list[str] = []
    job = dataclasses.replace(url_counts(state_backend="rocksdb"), rocksdb=RocksDBConfig(
        RocksDBProfile.FLASH_SSD, lambda state, options: seen.append(state)))
    with KeyedProcessFunctionHarness.for_stage(job, "count_hits") as harness:
        assert harness.state_backend is StateBackendKind.ROCKSDB
        harness.process_all(json.loads(record) for record in generate(50))
        assert harness.output and "hits" in seen  # (and the timer queues' states, "_timers.<domain>")
