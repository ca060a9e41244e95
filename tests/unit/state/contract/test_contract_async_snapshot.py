"""The asynchronous-snapshot contract (issue #37): on every backend, ``snapshot_async`` captures the
state as it is at the call, and its ``run`` writes exactly that state, however the state is
changed between the two, from the same thread or while ``run`` writes on another thread: values
replaced and deleted, list elements appended, map entries put and removed, a value the function
read and changed in place before writing it back, an accumulator its aggregate function changes
in place, whole maps cleared, a state defined after the capture, timers added and removed; on
RocksDB also with every change landed in the live database before its capture thread takes the
checkpoint. The live state is unaffected by the snapshot (it matches a backend that took none),
two captures can be pending at once, one not taken yet is taken by its run or the next snapshot,
and a capture released without being written leaves nothing behind."""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any

import pytest

from tidemark.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from tidemark.types import CheckpointId

ALL_KINDS = ("heap", "rocksdb", "changelog")
KEYS = list(range(60)) + [f"user-{i}" for i in range(20)]


class Mean:
    """An aggregate function that changes its accumulator in place, as many Flink ones do."""

    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        accumulator[0] += value
        accumulator[1] += 1
        return accumulator

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


def _states(backend: Any) -> tuple[Any, ...]:
    return (backend.get_state(ValueStateDescriptor("count", default=0)),
            backend.get_state(ValueStateDescriptor("profile")),
            backend.get_state(ListStateDescriptor("events")),
            backend.get_state(MapStateDescriptor("index")),
            backend.get_state(AggregatingStateDescriptor("mean", Mean())),
            backend.timer_queue("t"))


def write_round(backend: Any, round_: int) -> None:
    """Every kind of change, for every key; each round differs from the others."""
    count, profile, events, index, mean, timers = _states(backend)
    for n, key in enumerate(KEYS):
        backend.set_current_key(key)
        if (n + round_) % 7 == 0:
            count.update(None)
        else:
            count.update(count.value() + round_)
        visited = profile.value() or {"visits": 0, "pages": []}
        visited["visits"] += 1  # changed in place, then written back: the capture must not see it
        visited["pages"].append(f"/p/{round_}")
        profile.update(visited)
        events.add(round_ * 1000 + n)
        if (n + round_) % 5 == 0:
            events.update([round_])
        entries = index.get(n % 4) or []
        entries.append(round_)  # a map value changed in place, then put again
        index.put(n % 4, entries)
        if round_ % 2 == 0:
            index.remove((n + 1) % 4)
        mean.add(round_ * 10 + n % 3)
        timers.add(round_ * 1000 + n)
        if n % 3 == 0:
            timers.remove((round_ - 1) * 1000 + n)


def read_all(backend: Any) -> dict[Any, tuple[Any, ...]]:
    """Every key's state, copied (the function changes what it reads in place)."""
    count, profile, events, index, mean, timers = _states(backend)
    seen = {}
    for key in KEYS:
        backend.set_current_key(key)
        seen[key] = (count.value(), profile.value(), events.get(), dict(index.items()), mean.get(),
                     timers.timestamps())
    return copy.deepcopy(seen)


def restored(new_backend: Any, kind: str, snapshot: Any, storage: Any) -> dict[Any, tuple[Any, ...]]:
    target = new_backend(kind=kind)
    target.restore([snapshot], storage)
    return read_all(target)


def _late_changes(backend: Any, round_: int) -> None:
    """What ``write_round`` does not: whole maps cleared, a state defined after the capture."""
    _, _, _, index, _, _ = _states(backend)
    late = backend.get_state(ValueStateDescriptor("late"))
    for n, key in enumerate(KEYS):
        backend.set_current_key(key)
        if n % 3 == round_ % 3:
            index.clear()
        late.update(round_)


@pytest.mark.parametrize("held", [False, True], ids=["captured", "capture-held"])
@pytest.mark.parametrize("canonical", [False, True], ids=["checkpoint", "savepoint"])
def test_the_snapshot_holds_the_state_of_its_capture_whatever_changes_after(new_backend, storage, capture_held,
                                                                             canonical: bool, held: bool) -> None:
    """``held``: RocksDB's capture thread waits until every change below has landed in the live
    database, so its checkpoint must undo them all (other backends capture at once)."""
    if not held:
        capture_held.set()
    source, mirror = new_backend(), new_backend()
    for backend in (source, mirror):
        write_round(backend, 1)
    pending = source.snapshot_async(CheckpointId(1), storage, canonical=canonical)
    expected = read_all(source)
    for round_ in (2, 3):
        for backend in (source, mirror):
            write_round(backend, round_)
            _late_changes(backend, round_)
    capture_held.set()
    snapshot = pending.run()
    assert read_all(source) == read_all(mirror) != expected  # the live state went on unaffected
    for kind in ALL_KINDS if canonical else (None,):
        target = new_backend(kind=kind)
        target.restore([snapshot], storage)
        assert read_all(target) == expected
        late = target.get_state(ValueStateDescriptor("late"))
        for key in KEYS:
            target.set_current_key(key)
            assert late.value() is None


def test_the_snapshot_is_written_on_another_thread_while_the_state_changes(new_backend, storage) -> None:
    source, mirror = new_backend(), new_backend()
    for backend in (source, mirror):
        write_round(backend, 1)
    pending = source.snapshot_async(CheckpointId(1), storage)
    expected = read_all(source)
    written: list[Any] = []
    writer = threading.Thread(target=lambda: written.append(pending.run()))
    writer.start()
    for round_ in range(2, 8):
        for backend in (source, mirror):
            write_round(backend, round_)
    writer.join(timeout=60)
    assert written and read_all(source) == read_all(mirror)
    assert restored(new_backend, None, written[0], storage) == expected


def test_two_captures_pending_at_once_each_write_their_own_state(new_backend, storage) -> None:
    source = new_backend()
    write_round(source, 1)
    first = source.snapshot_async(CheckpointId(1), storage)
    expected_first = read_all(source)
    write_round(source, 2)
    second = source.snapshot_async(CheckpointId(2), storage)
    expected_second = read_all(source)
    write_round(source, 3)
    one, two = first.run(), second.run()
    assert restored(new_backend, None, one, storage) == expected_first
    assert restored(new_backend, None, two, storage) == expected_second


def test_a_released_capture_leaves_nothing_behind(new_backend, storage, tmp_path: Path) -> None:
    source = new_backend()
    write_round(source, 1)
    pending = source.snapshot_async(CheckpointId(1), storage)
    pending.release()
    pending.release()  # twice: nothing more
    write_round(source, 2)
    after = read_all(source)
    assert not list((tmp_path / "checkpoints").rglob("chk-1/*"))  # nothing was written to storage
    assert not [p for p in tmp_path.rglob("chk-1") if "rocks-" in str(p)]  # nor kept locally
    snapshot = source.snapshot(CheckpointId(2), storage)
    assert restored(new_backend, None, snapshot, storage) == after


def test_a_capture_not_taken_yet_is_taken_by_its_run_or_by_the_next_snapshot(new_backend, storage,
                                                                             capture_held) -> None:
    source = new_backend()
    write_round(source, 1)
    first = source.snapshot_async(CheckpointId(1), storage)
    expected_first = read_all(source)
    write_round(source, 2)
    second = source.snapshot_async(CheckpointId(2), storage)  # takes the first's checkpoint now
    expected_second = read_all(source)
    write_round(source, 3)
    two = second.run()  # its capture thread still held: taken here
    write_round(source, 4)
    one = first.run()
    assert restored(new_backend, None, one, storage) == expected_first
    assert restored(new_backend, None, two, storage) == expected_second
