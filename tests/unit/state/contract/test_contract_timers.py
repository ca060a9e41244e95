"""The timer contract (issue #15, "timers are state"): on every backend, timers are stored per key
and deduplicated, fire in (timestamp, key) order with their key current, and are in every kind
of snapshot (the backend's own checkpoint snapshot: full on heap, incremental on RocksDB,
changelog ranges in changelog mode; and canonical savepoints, restored into every backend), and
a rescale 2 -> 3 -> 2 keeps each timer exactly once. Then the timer queues behind the service
(``backend.timer_queue``): a random mix of operations against a model, negative and extreme
timestamps, repeated checkpoints with deletions, many key groups, snapshots written before timer
queues, the reserved state names. Also the backends' ``keys`` (Flink's ``getKeys``). And timers
in namespaces (issue #34, a window's timers): one timer per (key, namespace, timestamp), fired in
(timestamp, key, namespace) order with their namespace, deleted and listed per namespace, in every
kind of snapshot and through a rescale 2 -> 3 -> 2; a RocksDB snapshot whose time-ordered family
has the layout from before namespaces restores."""

from __future__ import annotations

import random

import pytest

from tidemark.keygroups import assign_to_key_group, encode_key
from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.state import (
    KeyedSnapshot,
    KeyGroupRange,
    KeyNotInRangeError,
    MapStateDescriptor,
    StateRegistrationError,
    ValueStateDescriptor,
    compute_key_group_range,
)
from tidemark.state.serializers import DEFAULT_SERIALIZER
from tidemark.state.table import encode_namespace
from tidemark.state.snapshot import Entry, state_meta, write_snapshot
from tidemark.state.timer_queue import MAX_TIMESTAMP, MIN_TIMESTAMP, timer_order
from tidemark.state.timers import InternalTimerService, TimeDomain, Timer
from tidemark.types import CheckpointId

EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME
ALL_KINDS = ("heap", "rocksdb", "changelog")
MAX_P = 128
KEYS = [f"url-{i}" for i in range(40)] + list(range(-5, 5)) + [b"raw-key"]


def timers_of(key: object) -> dict[TimeDomain, list[int]]:
    """What each key registers: a few event-time timers, and one processing-time timer."""
    n = len(repr(key))
    return {EVENT: [60_000 * (n % 3 + 1), 60_000 * (n % 3 + 1) + 7, 1_000 * n], PROCESSING: [5_000 + n]}


def register_all(backend, service: InternalTimerService, keys=KEYS) -> None:
    for key in keys:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        for domain, timestamps in timers_of(key).items():
            for timestamp in timestamps:
                service.register(domain, timestamp)
                service.register(domain, timestamp)  # the same timer twice is one timer


def expected_order(keys=KEYS, domain: TimeDomain = EVENT, until: int = 10**12) -> list[tuple[int, object]]:
    due = {(t, k) for k in keys for t in timers_of(k)[domain] if t <= until}
    return ordered(due)


def fire(backend, service: InternalTimerService, domain: TimeDomain, until: int) -> list[tuple[int, object]]:
    fired = []
    for timer in service.pop_due(domain, until):
        assert isinstance(timer, Timer) and timer.domain is domain
        assert backend.get_current_key() == timer.key  # the timer's key is current while it is handled
        fired.append((timer.timestamp, timer.key))
    return fired


def test_timers_are_deduplicated_and_fire_in_time_then_key_order(backend) -> None:
    service = InternalTimerService(backend)
    register_all(backend, service)
    assert service.count(EVENT) == len({(t, k) for k in KEYS for t in timers_of(k)[EVENT]})
    assert service.next_timestamp(EVENT) == expected_order()[0][0]
    first = fire(backend, service, EVENT, 60_000)
    assert first == expected_order(until=60_000)
    assert fire(backend, service, EVENT, 60_000) == []  # each timer fires once
    rest = fire(backend, service, EVENT, 10**12)
    assert first + rest == expected_order()
    assert service.count(EVENT) == 0 and service.next_timestamp(EVENT) is None
    assert fire(backend, service, PROCESSING, 10**12) == expected_order(domain=PROCESSING)  # domains apart


def test_a_deleted_timer_never_fires_and_can_be_registered_again(backend) -> None:
    service = InternalTimerService(backend)
    backend.set_current_key("a")
    service.register(EVENT, 10)
    service.register(EVENT, 20)
    service.delete(EVENT, 10)
    service.delete(EVENT, 99)  # no such timer: nothing happens
    assert service.timestamps(EVENT) == [20] and service.count(EVENT) == 1
    backend.set_current_key("b")
    service.register(EVENT, 10)
    service.delete(EVENT, 10)
    service.register(EVENT, 10)  # again after a delete: one timer, though the index saw it twice
    assert fire(backend, service, EVENT, 15) == [(10, "b")]
    assert service.next_timestamp(EVENT) == 20
    assert fire(backend, service, EVENT, 100) == [(20, "a")]


def test_a_timer_can_register_a_due_timer_while_timers_fire(backend) -> None:
    service = InternalTimerService(backend)
    backend.set_current_key("k")
    service.register(EVENT, 10)
    fired = []
    for timer in service.pop_due(EVENT, 100):
        fired.append(timer.timestamp)
        if timer.timestamp == 10:
            service.register(EVENT, 50)  # e.g. the next window of the same key
    assert fired == [10, 50]


def test_timers_are_in_the_backends_own_checkpoint_snapshots(new_backend, storage) -> None:
    source = new_backend()
    service = InternalTimerService(source)
    register_all(source, service)
    first = source.snapshot(CheckpointId(1), storage)
    fired = fire(source, service, EVENT, 60_000)  # then some fire, and the next checkpoint follows
    second = source.snapshot(CheckpointId(2), storage)
    source.notify_checkpoint_complete(CheckpointId(2))

    at_first = new_backend()
    at_first.restore([first], storage)
    assert fire(at_first, InternalTimerService(at_first), EVENT, 10**12) == expected_order()
    at_second = new_backend()
    at_second.restore([second], storage)
    restored = InternalTimerService(at_second)
    assert fired + fire(at_second, restored, EVENT, 10**12) == expected_order()
    assert fire(at_second, restored, PROCESSING, 10**12) == expected_order(domain=PROCESSING)


def test_timers_in_a_canonical_savepoint_restore_into_every_backend(new_backend, storage) -> None:
    source = new_backend()
    register_all(source, InternalTimerService(source))
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        service = InternalTimerService(target)
        assert fire(target, service, EVENT, 10**12) == expected_order(), kind
        assert fire(target, service, PROCESSING, 10**12) == expected_order(domain=PROCESSING), kind


def _rescale(new_backend, storage, snapshots, parallelism: int, checkpoint_id: int, fired: list) -> list:
    """Restore ``snapshots`` at ``parallelism``; fire each instance's timers up to 60 s; snapshot."""
    out = []
    for index in range(parallelism):
        key_groups = compute_key_group_range(MAX_P, parallelism, index)
        backend = new_backend(key_groups, MAX_P, operator_id="op")
        backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
        service = InternalTimerService(backend)
        fired.extend(fire(backend, service, EVENT, 60_000 * checkpoint_id))
        out.append(backend.snapshot(CheckpointId(checkpoint_id), storage, canonical=True))
    return out


def test_a_rescale_2_to_3_to_2_keeps_each_timer_once(new_backend, storage) -> None:
    snapshots = []
    for index in range(2):
        backend = new_backend(compute_key_group_range(MAX_P, 2, index), MAX_P, operator_id="op")
        register_all(backend, InternalTimerService(backend))
        snapshots.append(backend.snapshot(CheckpointId(1), storage, canonical=True))
    fired: list[tuple[int, object]] = []
    snapshots = _rescale(new_backend, storage, snapshots, 3, 1, fired)  # fires the first minute's
    snapshots = _rescale(new_backend, storage, snapshots, 2, 2, fired)  # and the second's
    snapshots = _rescale(new_backend, storage, snapshots, 2, 10**6, fired)  # and the rest
    assert sorted(fired, key=repr) == sorted(expected_order(), key=repr)


def test_keys_lists_each_key_of_a_state_once_across_namespaces(backend) -> None:
    value = backend.get_state(ValueStateDescriptor("v"))
    mapping = backend.get_state(MapStateDescriptor("m"))
    for key in KEYS:
        backend.set_current_key(key)
        mapping.put(1, "a")
        mapping.put(2, "b")
        mapping.set_current_namespace("window-1")
        mapping.put(3, "c")
        mapping.set_current_namespace(None)
    backend.set_current_key("only-v")
    value.update(1)
    keys = list(backend.keys("m"))
    assert sorted(keys, key=repr) == sorted(KEYS, key=repr)
    assert list(backend.keys("v")) == ["only-v"]
    assert backend.get_current_key() == "only-v"  # listing keys leaves the current key alone


# ---------------------------------------------------------------------- timer queues (issue #15)

def ordered(timers: set[tuple[int, object]]) -> list[tuple[int, object]]:
    """(timestamp, key) timers of the default namespace in the queues' order."""
    return sorted(timers, key=lambda tk: (tk[0], timer_order(encode_key(tk[1]), b"")))


def random_operations(backend, service: InternalTimerService, model: set[tuple[int, object]], rng: random.Random,
                      keys: list[object], steps: int, timestamps: range) -> None:
    """Register, delete, fire and look up at random, checking every answer against ``model``
    (the set of (timestamp, key) timers of the event-time domain)."""
    for _ in range(steps):
        roll = rng.random()
        key = rng.choice(keys)
        backend.set_current_key(key)
        if roll < 0.55:
            timestamp = rng.choice(timestamps)
            service.register(EVENT, timestamp)
            model.add((timestamp, key))
        elif roll < 0.8:
            mine = sorted(t for t, k in model if k == key)
            timestamp = rng.choice(mine) if mine and rng.random() < 0.8 else rng.choice(timestamps)
            service.delete(EVENT, timestamp)
            model.discard((timestamp, key))
        elif roll < 0.9:
            assert service.timestamps(EVENT) == sorted(t for t, k in model if k == key)
        else:
            until = rng.choice(timestamps)
            due = [tk for tk in ordered(model) if tk[0] <= until][: rng.randrange(1, 20)]
            popped = []
            for timer in service.pop_due(EVENT, until):
                assert backend.get_current_key() == timer.key
                popped.append((timer.timestamp, timer.key))
                if len(popped) == len(due):
                    break  # a caller may stop early: the rest stays registered
            assert popped == due
            model.difference_update(popped)
        assert service.count(EVENT) == len(model)
        head = ordered(model)[0][0] if model else None
        assert service.next_timestamp(EVENT) == head


def test_a_random_mix_of_operations_matches_a_model(backend) -> None:
    rng = random.Random(15)
    service = InternalTimerService(backend)
    model: set[tuple[int, object]] = set()
    keys = [f"k{i}" for i in range(60)] + list(range(-20, 20))
    random_operations(backend, service, model, rng, keys, 3_000, range(-500, 500, 7))
    assert fire(backend, service, EVENT, MAX_TIMESTAMP) == ordered(model)


def test_negative_and_extreme_timestamps_fire_in_numeric_order_after_a_savepoint(new_backend, storage) -> None:
    source = new_backend()
    service = InternalTimerService(source)
    stamps = [MIN_TIMESTAMP, -(2**40), -60_000, -1, 0, 1, 255, 256, 60_000, 2**40, MAX_TIMESTAMP]
    for key in ("a", "b", 7):
        source.set_current_key(key)
        for timestamp in reversed(stamps):
            service.register(EVENT, timestamp)
    for bad in (MIN_TIMESTAMP - 1, MAX_TIMESTAMP + 1):
        with pytest.raises(ValueError):
            service.register(EVENT, bad)
        service.delete(EVENT, bad)  # there is no such timer: nothing happens
    source.set_current_key("a")
    assert service.timestamps(EVENT) == stamps
    expected = ordered({(t, k) for t in stamps for k in ("a", "b", 7)})
    assert service.next_timestamp(EVENT) == MIN_TIMESTAMP
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        restored = InternalTimerService(target)
        assert fire(target, restored, EVENT, -1) == [tk for tk in expected if tk[0] <= -1], kind
        assert fire(target, restored, EVENT, MAX_TIMESTAMP) == [tk for tk in expected if tk[0] > -1], kind


def test_timers_survive_repeated_checkpoints_with_deletions_and_firing(new_backend, storage) -> None:
    """The backend's own checkpoint snapshots (incremental on RocksDB, changelog ranges in
    changelog mode), each taken after timers were deleted, fired and added, restore exactly."""
    rng = random.Random(7)
    source = new_backend()
    service = InternalTimerService(source)
    model: set[tuple[int, object]] = set()
    keys = [f"user-{i}" for i in range(80)]
    checkpoints = []
    for checkpoint in range(1, 5):
        random_operations(source, service, model, rng, keys, 400, range(checkpoint * 1_000, checkpoint * 1_000 + 3_000, 10))
        snapshot = source.snapshot(CheckpointId(checkpoint), storage)
        source.notify_checkpoint_complete(CheckpointId(checkpoint))
        checkpoints.append((snapshot, ordered(model)))
    for snapshot, expected in checkpoints:
        restored = new_backend()
        restored.restore([snapshot], storage)
        timers = InternalTimerService(restored)
        assert timers.count(EVENT) == len(expected)
        assert fire(restored, timers, EVENT, MAX_TIMESTAMP) == expected


def test_timers_of_many_key_groups_fire_in_order_and_rescale(new_backend, storage) -> None:
    max_p = 4096
    keys = [f"session-{i}" for i in range(1_500)]
    expected = ordered({(1_000 * (i % 50) - 20_000, key) for i, key in enumerate(keys)}
                       | {(7, key) for key in keys[::3]})
    snapshots = []
    for index in range(2):
        source = new_backend(compute_key_group_range(max_p, 2, index), max_p, operator_id="op")
        service = InternalTimerService(source)
        for timestamp, key in expected:
            try:
                source.set_current_key(key)
            except KeyNotInRangeError:
                continue
            service.register(EVENT, timestamp)
        snapshots.append(source.snapshot(CheckpointId(1), storage, canonical=True))
    fired = []
    for index in range(3):
        key_groups = compute_key_group_range(max_p, 3, index)
        target = new_backend(key_groups, max_p, operator_id="op")
        target.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
        mine = fire(target, InternalTimerService(target), EVENT, MAX_TIMESTAMP)
        assert mine == ordered(set(mine))  # each instance fires its own in order
        fired.extend(mine)
    assert ordered(set(fired)) == expected and len(fired) == len(expected)


def test_snapshots_written_before_timer_queues_restore(new_backend, storage) -> None:
    """A canonical snapshot that holds timers as the plain map state ``_timers.event-time`` (what
    every snapshot held before timer queues) restores into every backend."""
    key_groups = KeyGroupRange(0, MAX_P - 1)
    meta = state_meta(MapStateDescriptor("_timers.event-time"))
    expected = ordered({(t, k) for k in KEYS for t in timers_of(k)[EVENT]})
    entries = sorted((Entry(meta["name"], assign_to_key_group(k, MAX_P), encode_key(k), b"",
                            DEFAULT_SERIALIZER.serialize(t), DEFAULT_SERIALIZER.serialize(True))
                      for t, k in expected), key=lambda e: e.key_group)
    header = {"checkpoint_id": 1, "max_parallelism": MAX_P, "key_group_start": 0,
              "key_group_end": MAX_P - 1, "backend": "heap"}
    ref = storage.write_bytes("old/chk-1/kg-0-127.tmks", write_snapshot(header, [meta], entries))
    snapshot = KeyedSnapshot(key_groups, (StateHandle(StateHandleKind.KEYED_FULL, "operator", 0, MAX_P - 1,
                                                      (ref,), ref.size_bytes, ref.size_bytes),))
    target = new_backend()
    target.restore([snapshot], storage)
    service = InternalTimerService(target)
    assert service.count(EVENT) == len(expected)
    assert fire(target, service, EVENT, MAX_TIMESTAMP) == expected


def test_timer_state_names_are_reserved(backend) -> None:
    with pytest.raises(StateRegistrationError):
        backend.get_state(MapStateDescriptor("_timers.event-time"))


def test_every_service_of_a_backend_sees_the_same_timers(backend) -> None:
    first, second = InternalTimerService(backend), InternalTimerService(backend)
    backend.set_current_key("k")
    first.register(PROCESSING, 5)
    assert second.timestamps(PROCESSING) == [5] and second.count(PROCESSING) == 1
    assert fire(backend, second, PROCESSING, 5) == [(5, "k")]
    assert first.count(PROCESSING) == 0


# ---------------------------------------------------------------------- timers in namespaces (issue #34)

WINDOWS = [None, (0, 60_000), (60_000, 120_000), (-60_000, 0)]


def register_namespaced(backend, service: InternalTimerService, keys=KEYS) -> set[tuple[int, object, object]]:
    """Each key's timers in every namespace of WINDOWS, each at the window's last millisecond
    (the default namespace: at 30 s) and once more at a time shared by every namespace."""
    registered = set()
    for key in keys:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        for window in WINDOWS:
            for timestamp in ((30_000 if window is None else window[1] - 1), 90_000):
                service.register(EVENT, timestamp, window)
                service.register(EVENT, timestamp, window)  # one timer per (key, namespace, timestamp)
                registered.add((timestamp, key, window))
    return registered


def ordered_namespaced(timers) -> list[tuple[int, object, object]]:
    return sorted(timers, key=lambda t: (t[0], timer_order(encode_key(t[1]), encode_namespace(t[2]))))


def fire_namespaced(backend, service: InternalTimerService, until: int) -> list[tuple[int, object, object]]:
    fired = []
    for timer in service.pop_due(EVENT, until):
        assert backend.get_current_key() == timer.key
        fired.append((timer.timestamp, timer.key, timer.namespace))
    return fired


def test_namespaced_timers_are_one_per_key_namespace_and_time_and_fire_in_order(backend) -> None:
    service = InternalTimerService(backend)
    registered = register_namespaced(backend, service)
    assert service.count(EVENT) == len(registered)
    backend.set_current_key("url-1")
    assert service.timestamps(EVENT, (0, 60_000)) == [59_999, 90_000]
    assert service.timestamps(EVENT) == [30_000, 90_000]  # the default namespace's only
    service.delete(EVENT, 90_000, (0, 60_000))  # in one namespace: the others keep theirs
    assert service.timestamps(EVENT, (0, 60_000)) == [59_999]
    assert service.timestamps(EVENT, (60_000, 120_000)) == [90_000, 119_999]
    registered.discard((90_000, "url-1", (0, 60_000)))
    assert fire_namespaced(backend, service, MAX_TIMESTAMP) == ordered_namespaced(registered)


def test_namespaced_timers_are_in_every_kind_of_snapshot_and_restore_into_every_backend(new_backend, storage) -> None:
    source = new_backend()
    service = InternalTimerService(source)
    registered = register_namespaced(source, service)
    own = source.snapshot(CheckpointId(1), storage)
    fired = fire_namespaced(source, service, 59_999)
    canonical = source.snapshot(CheckpointId(2), storage, canonical=True)
    source.notify_checkpoint_complete(CheckpointId(2))
    at_own = new_backend()
    at_own.restore([own], storage)
    assert fire_namespaced(at_own, InternalTimerService(at_own), MAX_TIMESTAMP) == ordered_namespaced(registered)
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([canonical], storage)
        assert fired + fire_namespaced(target, InternalTimerService(target), MAX_TIMESTAMP) == \
            ordered_namespaced(registered), kind


def test_a_rescale_2_to_3_to_2_keeps_each_namespaced_timer_once(new_backend, storage) -> None:
    snapshots, registered = [], set()
    for index in range(2):
        backend = new_backend(compute_key_group_range(MAX_P, 2, index), MAX_P, operator_id="op")
        registered |= register_namespaced(backend, InternalTimerService(backend))
        snapshots.append(backend.snapshot(CheckpointId(1), storage, canonical=True))
    fired: list[tuple[int, object, object]] = []
    for parallelism, until, checkpoint_id in ((3, 59_999, 2), (2, MAX_TIMESTAMP, 3)):
        restored = []
        for index in range(parallelism):
            key_groups = compute_key_group_range(MAX_P, parallelism, index)
            backend = new_backend(key_groups, MAX_P, operator_id="op")
            backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
            fired.extend(fire_namespaced(backend, InternalTimerService(backend), until))
            restored.append(backend.snapshot(CheckpointId(checkpoint_id), storage, canonical=True))
        snapshots = restored
    assert sorted(fired, key=repr) == sorted(registered, key=repr) and len(fired) == len(registered)


def test_a_rocksdb_snapshot_with_the_time_order_layout_from_before_namespaces_restores(new_backend, storage) -> None:
    """An incremental RocksDB snapshot written before timers had namespaces holds the
    time-ordered family ``timers:<queue>`` (``key group | timestamp | stored key``): restored, the
    queue is rebuilt from the per-key index under its new name and the old family is dropped."""
    import rocksdict

    from tidemark.state.rocksdb.timers import LEGACY_TIME_ORDER_CF_PREFIX, split_time_key, time_order_cf_name

    source = new_backend(kind="rocksdb")
    register_all(source, InternalTimerService(source))
    db, name = source._db, time_order_cf_name("event-time")
    legacy = db.create_column_family(LEGACY_TIME_ORDER_CF_PREFIX + "event-time", rocksdict.Options(raw_mode=True))
    for db_key in source._timer_cf(name).keys():
        key_group, timestamp, stored, _ = split_time_key(db_key)
        legacy.put(db_key[:10] + stored, b"")
    source._timer_cfs.pop(name)
    db.drop_column_family(name)
    snapshot = source.snapshot(CheckpointId(1), storage)
    target = new_backend(kind="rocksdb")
    target.restore([snapshot], storage)
    assert fire(target, InternalTimerService(target), EVENT, 10**12) == expected_order()
    families = rocksdict.Rdict.list_cf(str(target._db_path), target._resources.db_options())
    assert name in families and not [f for f in families if f.startswith(LEGACY_TIME_ORDER_CF_PREFIX)]
