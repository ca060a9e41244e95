"""The TTL contract (Flink's semantics) with an injected clock, on every backend."""

from __future__ import annotations

from tidemark.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tidemark.types import CheckpointId


def ttl(update_type: str = "on_create_and_write", visibility: str = "never_return_expired"):
    return StateTtlConfig(10, update_type=update_type, visibility=visibility)


def test_value_expires_after_ttl(backend, clock) -> None:
    state = backend.get_state(ValueStateDescriptor("v", default="none", ttl=ttl()))
    backend.set_current_key("k")
    state.update("x")
    clock.advance(9_999)
    assert state.value() == "x"
    clock.advance(1)
    assert state.value() == "none"


def test_on_create_and_write_does_not_extend_on_read(backend, clock) -> None:
    state = backend.get_state(ValueStateDescriptor("v", ttl=ttl()))
    backend.set_current_key("k")
    state.update(1)
    clock.advance(6_000)
    assert state.value() == 1
    clock.advance(6_000)
    assert state.value() is None


def test_on_read_and_write_extends_on_read(backend, clock) -> None:
    state = backend.get_state(ValueStateDescriptor("v", ttl=ttl("on_read_and_write")))
    backend.set_current_key("k")
    state.update(1)
    clock.advance(6_000)
    assert state.value() == 1
    clock.advance(6_000)
    assert state.value() == 1
    clock.advance(10_000)
    assert state.value() is None


def test_writes_refresh_the_timestamp(backend, clock) -> None:
    state = backend.get_state(ReducingStateDescriptor("sum", lambda a, b: a + b, ttl=ttl()))
    backend.set_current_key("k")
    state.add(1)
    clock.advance(8_000)
    state.add(2)
    clock.advance(8_000)
    assert state.get() == 3


def test_return_expired_if_not_cleaned_up_returns_it_once(backend, clock) -> None:
    config = ttl(visibility="return_expired_if_not_cleaned_up")
    state = backend.get_state(ValueStateDescriptor("v", ttl=config))
    backend.set_current_key("k")
    state.update("stale")
    clock.advance(10_000)
    assert state.value() == "stale"  # not cleaned up yet: returned, and cleaned up by this read
    assert state.value() is None


def test_list_elements_expire_individually(backend, clock) -> None:
    state = backend.get_state(ListStateDescriptor("l", ttl=ttl()))
    backend.set_current_key("k")
    state.add("old")
    clock.advance(6_000)
    state.add("new")
    clock.advance(5_000)
    assert state.get() == ["new"]
    clock.advance(5_000)
    assert state.get() == []


def test_map_entries_expire_individually(backend, clock) -> None:
    state = backend.get_state(MapStateDescriptor("m", ttl=ttl()))
    backend.set_current_key("k")
    state.put("old", 1)
    clock.advance(6_000)
    state.put("new", 2)
    clock.advance(5_000)
    assert not state.contains("old") and state.get("new") == 2
    assert dict(state.items()) == {"new": 2}
    clock.advance(5_000)
    assert state.is_empty()


def test_full_snapshot_drops_expired_values(new_backend, clock, storage) -> None:
    source = new_backend()
    state = source.get_state(ValueStateDescriptor("v", ttl=ttl()))
    for key in range(20):
        source.set_current_key(key)
        state.update(key)
        if key == 9:
            clock.advance(6_000)
    clock.advance(5_000)  # keys 0..9 are now expired, 10..19 are not
    snapshot = source.snapshot(CheckpointId(1), storage, canonical=True)  # incremental keeps expired values
    for kind in ("heap", "rocksdb", "changelog"):
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        restored = target.get_state(ValueStateDescriptor("v", ttl=ttl(
            visibility="return_expired_if_not_cleaned_up")))
        seen = {}
        for key in range(20):
            target.set_current_key(key)
            seen[key] = restored.value()
        assert seen == {k: (k if k >= 10 else None) for k in range(20)}


def test_cleanup_scan_removes_expired(backend, clock) -> None:
    config = ttl(visibility="return_expired_if_not_cleaned_up")
    state = backend.get_state(ListStateDescriptor("l", ttl=config))
    values = backend.get_state(ValueStateDescriptor("v", ttl=config))
    backend.set_current_key("a")
    state.add_all([1, 2])
    values.update("old")
    clock.advance(6_000)
    backend.set_current_key("b")
    state.add(3)
    clock.advance(5_000)
    assert backend.cleanup_expired_state() == 2  # list of "a" and value of "a"
    backend.set_current_key("a")
    assert state.get() == [] and values.value() is None  # gone, not merely hidden
    backend.set_current_key("b")
    assert state.get() == [3]


def test_incremental_cleanup_goes_on_where_it_stopped_and_starts_over_after_a_pass(backend, clock) -> None:
    """What a running task calls after each batch and tick: a bounded number of stored values
    per call, resumed where the last call stopped, over every TTL state (the plain one is not
    touched), until a pass has gone over all; the next pass finds what expired since."""
    config = ttl(visibility="return_expired_if_not_cleaned_up")
    values = backend.get_state(ValueStateDescriptor("v", ttl=config))
    entries = backend.get_state(MapStateDescriptor("m", ttl=config))
    plain = backend.get_state(ValueStateDescriptor("plain"))
    for key in range(40):
        backend.set_current_key(key)
        values.update(key)
        if key % 2:
            entries.put("e", key)
        plain.update(key)
    clock.advance(6_000)
    for key in range(20, 40):  # refreshed: only keys 0..19 expire
        backend.set_current_key(key)
        values.update(-key)
        if key % 2:
            entries.put("e", -key)
    clock.advance(5_000)
    changes = [backend.cleanup_expired_state(limit=7) for _ in range(9)]  # 60 stored values, 7 a call
    assert all(n <= 7 for n in changes) and sum(changes) == 20 + 10  # keys 0..19 in "v", odd ones in "m"
    for key in range(40):
        backend.set_current_key(key)
        assert values.value() == (None if key < 20 else -key)  # gone, not merely hidden
        assert entries.get("e") == (None if key < 20 or key % 2 == 0 else -key)
        assert plain.value() == key
    clock.advance(11_000)  # now every value has expired: the next pass removes the rest
    assert sum(backend.cleanup_expired_state(limit=7) for _ in range(5)) == 20 + 10
    backend.set_current_key(39)
    assert values.value() is None and entries.get("e") is None and plain.value() == 39


def test_a_cleanup_reaches_the_change_listeners_so_a_replay_rebuilds_the_cleaned_state(new_backend, clock) -> None:
    """The changes a cleanup makes go to the listeners as any write's do (the changelog backend
    logs them): replaying everything the listeners saw into a new backend gives the cleaned
    state, not the expired values back (visible once more under return_expired_if_not_cleaned_up)."""
    config = ttl(visibility="return_expired_if_not_cleaned_up")
    descriptors = (ValueStateDescriptor("v", ttl=config), ListStateDescriptor("l", ttl=config),
                   MapStateDescriptor("m", ttl=config))
    source = new_backend()
    seen = []
    source.add_change_listener(seen.append)
    values, lists, maps = (source.get_state(d) for d in descriptors)
    for key in range(10):
        source.set_current_key(key)
        values.update(key)
        lists.add_all([key, key + 1])
        maps.put_all({"a": key, "b": key})
    clock.advance(6_000)
    for key in range(5):  # refreshed in part: a new list element and map entry, a new value
        source.set_current_key(key)
        values.update(-key)
        lists.add(100)
        maps.put("b", -key)
    clock.advance(5_000)  # what was written first has expired
    assert source.cleanup_expired_state() >= 5 * 2 + 5 * 3  # keys 0..4: list and map; 5..9: all three
    replayed = new_backend()
    for change in seen:
        replayed.apply_change(change)
    values, lists, maps = (replayed.get_state(d) for d in descriptors)
    for key in range(10):
        replayed.set_current_key(key)
        assert values.value() == (-key if key < 5 else None), key
        assert lists.get() == ([100] if key < 5 else []), key
        assert dict(maps.items()) == ({"b": -key} if key < 5 else {}), key
