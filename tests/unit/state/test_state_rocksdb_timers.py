"""The RocksDB timer queue (``tidemark.state.rocksdb.timers``): its column family is ordered by
(key group, timestamp, key); a restored queue reads counts and one cache per key group, never
every timer; tiny caches behave like the model; incremental snapshots carry the timer families
through a rescale 2 -> 3 -> 2; incremental snapshots written before timer queues (only the map
state ``_timers.*``) still restore; changelog mode over RocksDB logs and replays timers."""

from __future__ import annotations

import random

import pytest

from contract.test_contract_timers import fire, ordered, random_operations
from tidemark.keygroups import assign_to_key_group, encode_key
from tidemark.state import KeyGroupRange, MapStateDescriptor, RocksDBOptions, compute_key_group_range
from tidemark.state import local_backend
from tidemark.changelog.backend import ChangelogStateBackend, restore_from_changelog
from tidemark.state.rocksdb.timers import RocksDBTimerQueue, split_time_key, time_key
from tidemark.state.timer_queue import MAX_TIMESTAMP, MIN_TIMESTAMP
from tidemark.state.table import encode_namespace
from tidemark.state.timer_queue import timer_order
from tidemark.state.timers import InternalTimerService, TimeDomain
from tidemark.testing.changelog import InMemoryChangelogReader, InMemoryChangelogWriter
from tidemark.types import CheckpointId

EVENT = TimeDomain.EVENT_TIME
MAX_P = 128


def rocks_options(cache: int = 128) -> RocksDBOptions:
    return RocksDBOptions(block_cache_bytes=8 << 20, write_buffer_total_bytes=8 << 20,
                          write_buffer_bytes=4 << 20, timer_cache_size=cache)


def test_the_time_ordered_family_sorts_by_key_group_then_timestamp_then_key_then_namespace() -> None:
    timers = [(kg, t, encode_key(k), encode_namespace(ns)) for kg in (0, 1, 300)
              for t in (MIN_TIMESTAMP, -2, -1, 0, 1, 2**33, MAX_TIMESTAMP)
              for k in ("a", "b", "ab", 5) for ns in (None, (0, 10), (5, 10))]
    raw = [time_key(*timer) for timer in timers]
    assert [split_time_key(r) for r in sorted(raw)] == sorted(timers, key=lambda t: (t[0], t[1], timer_order(t[2], t[3])))


def test_a_restored_queue_holds_only_a_cache_per_key_group(new_backend, storage, monkeypatch) -> None:
    """100k timers restored from an incremental snapshot: the new service knows the count and the
    first timer, having read one cache per key group (no scan, not every timer in memory)."""
    source = new_backend(kind="rocksdb", options=rocks_options(cache=32))
    service = InternalTimerService(source)
    keys = [f"url-{i}" for i in range(25_000)]
    model = set()
    for i in range(100_000):
        key, timestamp = keys[i % len(keys)], 60_000 * (i // len(keys)) + i % 977
        source.set_current_key(key)
        service.register(EVENT, timestamp)
        model.add((timestamp, key))
    snapshot = source.snapshot(CheckpointId(1), storage)

    reads: list[int] = []
    refill = RocksDBTimerQueue._refill

    def counted_refill(self, kgi, from_key):
        before = len(self._caches[kgi])
        refill(self, kgi, from_key)
        reads.append(len(self._caches[kgi]) - before)

    monkeypatch.setattr(RocksDBTimerQueue, "_refill", counted_refill)
    restored = new_backend(kind="rocksdb", options=rocks_options(cache=32))
    restored.restore([snapshot], storage)
    timers = InternalTimerService(restored)
    queue = restored.timer_queue(EVENT.value)
    assert timers.count(EVENT) == len(model)
    assert len(reads) <= MAX_P and sum(reads) <= MAX_P * 32
    assert queue.cached_timers <= MAX_P * 32
    assert timers.next_timestamp(EVENT) == 0
    assert fire(restored, timers, EVENT, 10) == ordered({(t, k) for t, k in model if t <= 10})
    assert queue.cached_timers <= MAX_P * 32


@pytest.mark.parametrize("cache", [1, 2, 5])
def test_tiny_caches_match_the_model_across_snapshots(new_backend, storage, cache) -> None:
    rng = random.Random(cache)
    backend = new_backend(kind="rocksdb", options=rocks_options(cache))
    service = InternalTimerService(backend)
    model: set[tuple[int, object]] = set()
    keys = [f"k{i}" for i in range(40)] + list(range(-10, 10))
    for checkpoint in range(1, 4):
        random_operations(backend, service, model, rng, keys, 1_500, range(-300, 300, 3))
        snapshot = backend.snapshot(CheckpointId(checkpoint), storage)
        backend = new_backend(kind="rocksdb", options=rocks_options(cache))
        backend.restore([snapshot], storage)
        service = InternalTimerService(backend)
        assert service.count(EVENT) == len(model)
        assert backend.timer_queue(EVENT.value).cached_timers <= MAX_P * cache
    assert fire(backend, service, EVENT, MAX_TIMESTAMP) == ordered(model)


def test_incremental_snapshots_rescale_timers_2_to_3_to_2(new_backend, storage) -> None:
    """Native incremental snapshots (base clipped to the new range, the rest merged): every
    timer once, counts right."""
    keys = [f"url-{i}" for i in range(300)]
    expected = ordered({(1_000 * (i % 17) - 5_000, k) for i, k in enumerate(keys)} | {(42, k) for k in keys[::2]})
    snapshots, checkpoint = [], 1
    for index in range(2):
        backend = new_backend(compute_key_group_range(MAX_P, 2, index), MAX_P, kind="rocksdb", operator_id="op")
        service = InternalTimerService(backend)
        for t, k in expected:
            if assign_to_key_group(k, MAX_P) in backend.key_group_range:
                backend.set_current_key(k)
                service.register(EVENT, t)
        snapshots.append(backend.snapshot(CheckpointId(checkpoint), storage))
    for parallelism in (3, 2):
        checkpoint += 1
        rescaled, counted = [], 0
        for index in range(parallelism):
            key_groups = compute_key_group_range(MAX_P, parallelism, index)
            backend = new_backend(key_groups, MAX_P, kind="rocksdb", operator_id="op")
            backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
            counted += InternalTimerService(backend).count(EVENT)
            rescaled.append(backend.snapshot(CheckpointId(checkpoint), storage))
        assert counted == len(expected)
        snapshots = rescaled
    fired = []
    for snapshot in snapshots:
        backend = new_backend(snapshot.key_groups, MAX_P, kind="rocksdb", operator_id="op")
        backend.restore([snapshot], storage)
        fired.extend(fire(backend, InternalTimerService(backend), EVENT, MAX_TIMESTAMP))
    assert ordered(set(fired)) == expected and len(fired) == len(expected)


def test_incremental_snapshots_written_before_timer_queues_restore(new_backend, storage, monkeypatch) -> None:
    """Such a snapshot holds only the map state ``_timers.event-time``: RocksDB rebuilds the
    time-ordered family from it once; heap reads it as any map state."""
    with monkeypatch.context() as patch:
        patch.setattr(local_backend, "is_timer_state", lambda name: False)  # write it as older versions did
        source = new_backend(kind="rocksdb")
        timers = source.get_state(MapStateDescriptor("_timers.event-time"))
        expected = ordered({(t, k) for k in range(-30, 30) for t in (k * 1_000, -7, 60_000)})
        for t, k in expected:
            source.set_current_key(k)
            timers.put(t, True)
        snapshot = source.snapshot(CheckpointId(1), storage)
    for kind in ("rocksdb", "heap"):
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        service = InternalTimerService(target)
        assert service.count(EVENT) == len(expected), kind
        assert fire(target, service, EVENT, MAX_TIMESTAMP) == expected, kind


def test_an_incremental_snapshot_with_timers_restores_into_the_heap(new_backend, storage) -> None:
    source = new_backend(kind="rocksdb")
    service = InternalTimerService(source)
    for k in range(100):
        source.set_current_key(k)
        service.register(EVENT, -k)
        service.register(TimeDomain.PROCESSING_TIME, k)
    source.set_current_key(3)
    service.delete(EVENT, -3)
    snapshot = source.snapshot(CheckpointId(1), storage)
    heap = new_backend(kind="heap")
    heap.restore([snapshot], storage)
    restored = InternalTimerService(heap)
    assert fire(heap, restored, EVENT, 0) == ordered({(-k, k) for k in range(100) if k != 3})
    assert restored.count(TimeDomain.PROCESSING_TIME) == 100


def test_changelog_mode_over_rocksdb_logs_and_replays_timers(new_backend, changelog_topic, storage, tmp_path) -> None:
    """Timer changes reach the changelog in their canonical form; a changelog restore into
    RocksDB or heap, and a materializer-style replica (RocksDB replaying the changelog, then an
    incremental snapshot) bring them back."""
    def changelog_backend(attempt: int, inner):
        writer = InMemoryChangelogWriter(changelog_topic, max_parallelism=MAX_P, task_id="op#0", epoch=attempt)
        backend = ChangelogStateBackend(inner, writer, InMemoryChangelogReader(changelog_topic, max_parallelism=MAX_P))
        return backend

    full = KeyGroupRange(0, MAX_P - 1)
    source = changelog_backend(1, new_backend(kind="rocksdb"))
    service = InternalTimerService(source)
    rng = random.Random(3)
    model: set[tuple[int, object]] = set()
    random_operations(source, service, model, rng, [f"k{i}" for i in range(50)], 800, range(-200, 200, 4))
    snapshot = source.snapshot(CheckpointId(1), storage)
    source.notify_checkpoint_complete(CheckpointId(1))
    expected = ordered(model)

    for attempt, kind in ((2, "rocksdb"), (3, "heap")):
        restored = changelog_backend(attempt, new_backend(kind=kind))
        restored.restore([snapshot], storage)
        timers = InternalTimerService(restored)
        assert timers.count(EVENT) == len(expected), kind
        assert fire(restored, timers, EVENT, MAX_TIMESTAMP) == expected, kind
        restored.close()

    replica = new_backend(full, MAX_P, kind="rocksdb")
    restore_from_changelog(replica, [snapshot], storage, InMemoryChangelogReader(changelog_topic, max_parallelism=MAX_P))
    materialized = replica.snapshot(CheckpointId(1), storage)
    heap = new_backend(kind="heap")
    heap.restore([materialized], storage)
    assert fire(heap, InternalTimerService(heap), EVENT, MAX_TIMESTAMP) == expected
