"""The merging-state contract (issue #34, what session windows stand on), on every backend: list,
reducing and aggregating state of one key in several namespaces merge into a target namespace
(``merge_namespaces``, Flink's ``InternalMergingState``), the sources left empty; expired TTL
values take no part; the merged state is in the backend's own snapshots and in canonical
savepoints (restored into every backend), and namespaced state with windows still open survives a
rescale 2 -> 3 -> 2, merged on the way."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tidemark.state import (
    AggregatingStateDescriptor,
    KeyNotInRangeError,
    ListStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
    compute_key_group_range,
)
from tidemark.types import CheckpointId

ALL_KINDS = ("heap", "rocksdb", "changelog")
MAX_P = 128
KEYS = [f"ip-{i}" for i in range(60)] + list(range(-10, 10))
W1, W2, W3 = (0, 1_000), (1_500, 2_500), (2_000, 3_000)  # session windows: W3 bridges W2


@dataclass(frozen=True)
class MeanOf:
    """An aggregate function: (sum, count) accumulators, the mean as result."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value, accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def states(backend, ttl: StateTtlConfig | None = None):
    return (backend.get_state(ListStateDescriptor("contents", ttl=ttl)),
            backend.get_state(ReducingStateDescriptor("total", lambda a, b: a + b, ttl=ttl)),
            backend.get_state(AggregatingStateDescriptor("mean", MeanOf(), ttl=ttl)))


def add_in(handles, namespace, values) -> None:
    for state in handles:
        state.set_current_namespace(namespace)
        for value in values:
            state.add(value)


def read_in(handles, namespace):
    for state in handles:
        state.set_current_namespace(namespace)
    contents, total, mean = handles
    return contents.get(), total.get(), mean.get()


def test_list_reducing_and_aggregating_state_merge_namespaces_into_the_target(backend) -> None:
    handles = states(backend)
    backend.set_current_key("ip-1")
    add_in(handles, W1, [1, 2])
    add_in(handles, W2, [10])
    add_in(handles, W3, [20, 30])
    backend.set_current_key("ip-2")  # another key's windows take no part
    add_in(handles, W2, [100])
    backend.set_current_key("ip-1")
    for state in handles:
        state.set_current_namespace(W1)
        state.merge_namespaces(W2, [W2, W3])  # the target among the sources is left out
    assert read_in(handles, W2) == ([10, 20, 30], 60, 20.0)
    assert read_in(handles, W3) == ([], None, None)
    assert read_in(handles, W1) == ([1, 2], 3, 1.5)  # the current namespace was W1 and stays
    for state in handles:
        state.merge_namespaces(W2, [W1])
        state.merge_namespaces(W2, [(9, 9)])  # merging nothing changes nothing
    assert read_in(handles, W2) == ([10, 20, 30, 1, 2], 63, 12.6)
    assert read_in(handles, W1) == ([], None, None)
    backend.set_current_key("ip-2")
    assert read_in(handles, W2) == ([100], 100, 100.0)


def test_a_merge_into_an_empty_target_moves_the_state(backend) -> None:
    handles = states(backend)
    backend.set_current_key(7)
    add_in(handles, W3, [5])
    for state in handles:
        state.merge_namespaces(W1, [W3])
    assert read_in(handles, W1) == ([5], 5, 5.0)
    assert read_in(handles, W3) == ([], None, None)


def test_expired_values_take_no_part_in_a_merge(backend, clock) -> None:
    handles = states(backend, StateTtlConfig(ttl_seconds=1.0))
    backend.set_current_key("ip-1")
    add_in(handles, W1, [1])
    clock.advance(800)
    add_in(handles, W2, [10])
    clock.advance(500)  # W1's values expired, W2's not
    add_in(handles, W3, [100])
    for state in handles:
        state.merge_namespaces(W3, [W1, W2])
    assert read_in(handles, W3) == ([100, 10], 110, 55.0)  # the target's first
    clock.advance(600)  # W2's element expires; the merged single values got a new timestamp
    assert read_in(handles, W3) == ([100], 110, 55.0)


def write_sessions(backend) -> dict:
    """Every key of the backend gets three windows; W2 and W3 are merged into W2."""
    handles, expected = states(backend), {}
    for key in KEYS:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        n = len(repr(key))
        add_in(handles, W1, [n])
        add_in(handles, W2, [n, 1])
        add_in(handles, W3, [2])
        for state in handles:
            state.merge_namespaces(W2, [W3])
        expected[key] = {W1: ([n], n, float(n)), W2: ([n, 1, 2], n + 3, (n + 3) / 3)}
    return expected


def read_sessions(backend, keys) -> dict:
    handles, seen = states(backend), {}
    for key in keys:
        try:
            backend.set_current_key(key)
        except KeyNotInRangeError:
            continue
        seen[key] = {window: read_in(handles, window) for window in (W1, W2)}
        assert read_in(handles, W3) == ([], None, None)
    return seen


def test_merged_state_is_in_every_kind_of_snapshot_and_restores_into_every_backend(new_backend, storage) -> None:
    source = new_backend()
    expected = write_sessions(source)
    own = source.snapshot(CheckpointId(1), storage)
    canonical = source.snapshot(CheckpointId(2), storage, canonical=True)
    source.notify_checkpoint_complete(CheckpointId(2))
    at_own = new_backend()
    at_own.restore([own], storage)
    assert read_sessions(at_own, KEYS) == expected
    for kind in ALL_KINDS:
        target = new_backend(kind=kind)
        target.restore([canonical], storage)
        assert read_sessions(target, KEYS) == expected, kind


def test_open_windows_survive_a_rescale_2_to_3_to_2_and_merge_on_the_way(new_backend, storage) -> None:
    snapshots, expected = [], {}
    for index in range(2):
        backend = new_backend(compute_key_group_range(MAX_P, 2, index), MAX_P, operator_id="op")
        expected |= write_sessions(backend)
        snapshots.append(backend.snapshot(CheckpointId(1), storage, canonical=True))
    for parallelism, checkpoint_id in ((3, 2), (2, 3)):
        restored, seen = [], {}
        for index in range(parallelism):
            key_groups = compute_key_group_range(MAX_P, parallelism, index)
            backend = new_backend(key_groups, MAX_P, operator_id="op")
            backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
            mine = read_sessions(backend, KEYS)
            assert not set(mine) & set(seen), "a key restored into two instances"
            seen |= mine
            handles = states(backend)
            for key in mine:  # a record bridges W1 and W2: the session merges into W1
                backend.set_current_key(key)
                for state in handles:
                    state.merge_namespaces(W1, [W2])
                list_, total, mean = expected[key][W1]
                merged = expected[key].pop(W2)
                if merged[0]:
                    expected[key][W1] = (list_ + merged[0], total + merged[1],
                                         (total + merged[1]) / (len(list_) + len(merged[0])))
                expected[key].setdefault(W2, ([], None, None))
            restored.append(backend.snapshot(CheckpointId(checkpoint_id), storage, canonical=True))
        snapshots = restored
        assert set(seen) == set(KEYS)
    final = {}
    for index in range(2):
        key_groups = compute_key_group_range(MAX_P, 2, index)
        backend = new_backend(key_groups, MAX_P, operator_id="op")
        backend.restore([s for s in snapshots if len(s.key_groups.intersection(key_groups))], storage)
        final |= read_sessions(backend, KEYS)
    assert final == expected


def test_value_and_map_state_do_not_merge(backend) -> None:
    value = backend.get_state(ValueStateDescriptor("v"))
    assert not hasattr(value, "merge_namespaces")
    with pytest.raises(AttributeError):
        value.merge_namespaces(W1, [W2])
