"""The timer contract (issue #15, "timers are state"): on every backend, timers are stored per key
and deduplicated, fire in (timestamp, key) order with their key current, and are in every kind
of snapshot (the backend's own checkpoint snapshot: full on heap, incremental on RocksDB,
changelog ranges in changelog mode; and canonical savepoints, restored into every backend), and
a rescale 2 -> 3 -> 2 keeps each timer exactly once. Also the backends' ``keys`` (Flink's
``getKeys``), which the timer index is built from."""

from __future__ import annotations

from tidemark.state import KeyNotInRangeError, MapStateDescriptor, ValueStateDescriptor, compute_key_group_range
from tidemark.state.timers import TimeDomain, Timer, TimerService
from tidemark.types import CheckpointId

EVENT, PROCESSING = TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME
ALL_KINDS = ("heap", "rocksdb", "changelog")
MAX_P = 128
KEYS = [f"url-{i}" for i in range(40)] + list(range(-5, 5)) + [b"raw-key"]


def timers_of(key: object) -> dict[TimeDomain, list[int]]:
    """What each key registers: a few event-time timers, and one processing-time timer."""
    n = len(repr(key))
    return {EVENT: [60_000 * (n % 3 + 1), 60_000 * (n % 3 + 1) + 7, 1_000 * n], PROCESSING: [5_000 + n]}


def register_all(backend, service: TimerService, keys=KEYS) -> None:
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
    from tidemark.keygroups import encode_key

    due = {(t, k) for k in keys for t in timers_of(k)[domain] if t <= until}
    return [(t, k) for t, k in sorted(due, key=lambda tk: (tk[0], encode_key(tk[1])))]


def fire(backend, service: TimerService, domain: TimeDomain, until: int) -> list[tuple[int, object]]:
    fired = []
    for timer in service.pop_due(domain, until):
        assert isinstance(timer, Timer) and timer.domain is domain
        assert backend.get_current_key() == timer.key  # the timer's key is current while it is handled
        fired.append((timer.timestamp, timer.key))
    return fired


def test_timers_are_deduplicated_and_fire_in_time_then_key_order(backend) -> None:
    service = TimerService(backend)
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
    service = TimerService(backend)
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
    service = TimerService(backend)
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
    service = TimerService(source)
    register_all(source, service)
    first = source.snapshot(CheckpointId(1), storage)
    fired = fire(source, service, EVENT, 60_000)  # then some fire, and the next checkpoint follows
    second = source.snapshot(CheckpointId(2), storage)
    source.notify_checkpoint_complete(CheckpointId(2))

    at_first = new_backend()
    at_first.restore([first], storage)
    assert fire(at_first, TimerService(at_first), EVENT, 10**12) == expected_order()
    at_second = new_backend()
    at_second.restore([second], storage)
    restored = TimerService(at_second)
    assert fired + fire(at_second, restored, EVENT, 10**12) == expected_order()
    assert fire(at_second, restored, PROCESSING, 10**12) == expected_order(domain=PROCESSING)


def test_timers_in_a_canonical_savepoint_restore_into_every_backend(new_backend, storage) -> None:
    source = new_backend()
    register_all(source, TimerService(source))
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        service = TimerService(target)
        assert fire(target, service, EVENT, 10**12) == expected_order(), kind
        assert fire(target, service, PROCESSING, 10**12) == expected_order(domain=PROCESSING), kind


def _rescale(new_backend, storage, snapshots, parallelism: int, checkpoint_id: int, fired: list) -> list:
    """Restore ``snapshots`` at ``parallelism``; fire each instance's timers up to 60 s; snapshot."""
    out = []
    for index in range(parallelism):
        key_groups = compute_key_group_range(MAX_P, parallelism, index)
        backend = new_backend(key_groups, MAX_P, operator_id="op")
        backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
        service = TimerService(backend)
        fired.extend(fire(backend, service, EVENT, 60_000 * checkpoint_id))
        out.append(backend.snapshot(CheckpointId(checkpoint_id), storage, canonical=True))
    return out


def test_a_rescale_2_to_3_to_2_keeps_each_timer_once(new_backend, storage) -> None:
    snapshots = []
    for index in range(2):
        backend = new_backend(compute_key_group_range(MAX_P, 2, index), MAX_P, operator_id="op")
        register_all(backend, TimerService(backend))
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
