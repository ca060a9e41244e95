"""The state reader's round trip: every key's value of every state kind, read from checkpoints and
savepoints a harness wrote (heap, RocksDB full and incremental, changelog-backed) at parallelism 2
and again after a rescale to 3, equals what the harness restores; timers and operator state too."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.state_processor import StateReader, UnknownStage, UnknownState
from tidemark.state_processor.source import StateSourceError
from tidemark.testing.changelog import InMemoryChangelogReader, InMemoryChangelogTopic

from state_processor_stage import KEYED, STAGE, harness, keyed_state_of, request

KEYS = [f"10.0.0.{i}" for i in range(17)]
# (backend, savepoint, changelog): what writes the snapshot
WRITERS = {
    "heap-savepoint": ("heap", True, False),
    "heap-checkpoint": ("heap", False, False),
    "rocksdb-savepoint": ("rocksdb", True, False),
    "rocksdb-incremental": ("rocksdb", False, False),
    "changelog-heap": ("heap", False, True),
    "changelog-rocksdb": ("rocksdb", False, True),
}


def read_all(reader: StateReader) -> dict[str, dict[str, Any]]:
    """Every keyed state's rows, by state and key (each old task restored once: ``read_states``)."""
    out: dict[str, dict[str, Any]] = {d.name: {} for d in KEYED}
    for name, row in reader.read_states(STAGE):
        assert row.namespace is None
        if name == "by_method":
            out[name].setdefault(row.key, {})[row.user_key] = row.value
        else:
            assert row.key not in out[name]
            out[name][row.key] = row.value
    return out


def expected(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The harness's view without the values of keys that hold none (the reader has no rows for them)."""
    return {name: {k: v for k, v in values.items() if v not in (None, [], {})} for name, values in state.items()}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_key_of_every_state_kind_reads_as_the_harness_restores_it_before_and_after_a_rescale(
        writer: str) -> None:
    backend, savepoint, logged = WRITERS[writer]
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2) if logged else None
    changelog = (lambda task: InMemoryChangelogReader(topic, max_parallelism=128)) if topic else None
    first = harness(backend, 2, topic)
    with first:
        first.process_all(request(i) for i in range(40))
        snapshot = first.snapshot(savepoint=savepoint)
        first.notify_checkpoint_complete(snapshot.metadata.checkpoint_id)
        written = keyed_state_of(first, KEYS)
        timers = {key: first.timers(key) for key in KEYS}
    reader = StateReader.open(snapshot.storage, "profiles", path=snapshot.path, changelog=changelog)
    assert [p.task for p in reader.partitions(STAGE)] == [t.task_id for t in snapshot.metadata.tasks]
    assert read_all(reader) == expected(written)
    assert {row.key: row.value for row in reader.read(STAGE, "statuses")} == expected(written)["statuses"]
    timer_rows = list(reader.timers(STAGE))
    assert {key: sorted(r.timestamp for r in timer_rows if r.key == key) for key in KEYS} == timers
    assert {(r.domain, r.namespace) for r in timer_rows} == {("event-time", None)}
    assert sorted(r.value for r in reader.operator_state(STAGE) if r.state == "seen") == sorted(
        request(i)["ip"] for i in range(40))

    rescaled = harness(backend, 3, topic, storage=snapshot.storage)
    with rescaled.restore(snapshot):
        assert keyed_state_of(rescaled, KEYS) == written
        rescaled.process_all(request(i) for i in range(40, 60))
        again = rescaled.snapshot(checkpoint_id=2, savepoint=savepoint)
        written_again = keyed_state_of(rescaled, KEYS)
        timers_again = {key: rescaled.timers(key) for key in KEYS}
    reader = StateReader.open(again.storage, "profiles", checkpoint_id=2, changelog=changelog)
    assert len(reader.partitions(STAGE)) == 3
    assert read_all(reader) == expected(written_again)
    timer_rows = list(reader.timers(STAGE))
    assert {key: sorted(r.timestamp for r in timer_rows if r.key == key) for key in KEYS} == timers_again
    seen = [r for r in reader.operator_state(STAGE) if r.state == "seen"]
    assert {r.subtask for r in seen} == {0, 1, 2}
    assert sorted(r.value for r in seen) == sorted(request(i)["ip"] for i in range(60))


def test_one_partition_reads_only_its_old_task() -> None:
    with harness("heap", 2) as h:
        h.process_all(request(i) for i in range(40))
        snapshot = h.snapshot()
    reader = StateReader.open(snapshot.storage, "profiles", path=snapshot.path)
    first, second = reader.partitions(STAGE)
    rows = {p.task: list(reader.read(STAGE, "count", p)) for p in (first, second)}
    assert {r.task for r in rows[first.task]} == {first.task}
    assert all(r.key_group in first.key_groups for r in rows[first.task])
    assert sum(len(r) for r in rows.values()) == len(KEYS)
    assert sum(r.value for part in rows.values() for r in part) == 40


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_key_group_ranges_of_the_old_tasks_read_apart_give_the_same_rows(backend: str) -> None:
    with harness(backend, 2) as h:
        h.process_all(request(i) for i in range(40))
        snapshot = h.snapshot(savepoint=backend == "heap")
    reader = StateReader.open(snapshot.storage, "profiles", path=snapshot.path)
    ranges = reader.partitions(STAGE, max_key_groups=30)
    assert [(p.task, p.key_group_start, p.key_group_end) for p in ranges] == [
        ("profile#0", 0, 29), ("profile#0", 30, 59), ("profile#0", 60, 63),
        ("profile#1", 64, 93), ("profile#1", 94, 123), ("profile#1", 124, 127)]
    for part in ranges:
        assert all(row.key_group in part.key_groups for row in reader.read(STAGE, "count", part))
    apart = sorted((r.key, r.value) for part in ranges for r in reader.read(STAGE, "count", part))
    assert apart == sorted((r.key, r.value) for r in reader.read(STAGE, "count"))
    with pytest.raises(ValueError, match="at least 1"):
        reader.partitions(STAGE, max_key_groups=0)


def test_wrong_path_stage_or_state_is_a_one_line_error() -> None:
    with harness("heap", 2) as h:
        h.process(request(1))
        snapshot = h.snapshot()
    storage = snapshot.storage
    with pytest.raises(StateSourceError, match="no retained checkpoint or savepoint 9"):
        StateReader.open(storage, "profiles", checkpoint_id=9)
    with pytest.raises(StateSourceError, match="nothing in checkpoint storage"):
        StateReader.open(storage, "other-job", checkpoint_id=1)
    with pytest.raises(StateSourceError, match="no checkpoint or savepoint metadata"):
        StateReader.open(storage, "profiles", path="profiles/savepoints/sp-7")
    with pytest.raises(StateSourceError, match="belongs to job 'profiles'"):
        StateReader.open(storage, "other-job", path=snapshot.path)
    reader = StateReader.open(storage, "profiles", path="profiles/savepoints/sp-1")  # the directory will do
    with pytest.raises(UnknownStage, match="has no stage 'nope'; its stages: profile"):
        list(reader.read("nope", "count"))
    with pytest.raises(UnknownState, match="no keyed state 'nope'.*its states: average_bytes, by_method, count"):
        list(reader.read(STAGE, "nope"))
    for error in (UnknownStage, UnknownState):
        assert issubclass(error, StateSourceError)


def test_a_changelog_backed_task_needs_the_changelog() -> None:
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2)
    with harness("heap", 2, topic) as h:
        h.process_all(request(i) for i in range(5))
        snapshot = h.snapshot(savepoint=False)
    reader = StateReader.open(snapshot.storage, "profiles", path=snapshot.path)
    with pytest.raises(StateSourceError, match="changelog-backed: reading it needs the job's changelog"):
        list(reader.read(STAGE, "count"))


def test_values_become_what_json_holds() -> None:
    from tidemark.state_processor import json_compatible

    assert json_compatible({"a": (1, b"\x00\x01"), "b": None}) == {"a": [1, "AAE="], "b": None}
    assert json_compatible({1: "x", "y": [2.5, True]}) == [[1, "x"], ["y", [2.5, True]]]


def test_a_window_state_reads_with_its_windows_as_namespaces() -> None:
    from tidemark.examples.access_log_windows import sliding_url_counts
    from tidemark.testing import KeyedProcessFunctionHarness as Harness

    job = sliding_url_counts(size_ms=300_000, slide_ms=60_000)
    with Harness.for_stage(job, "url_windows", parallelism=2) as h:
        for ts in (30_000, 90_000):
            h.process({"ts": ts, "ip": "10.0.0.1", "method": "GET", "url": "/a", "status": 200, "bytes": 1},
                      timestamp_ms=ts)
        snapshot = h.snapshot()
    reader = StateReader.open(snapshot.storage, job.job_id, path=snapshot.path)
    windows = {(start, start + 300_000) for start in range(-240_000, 60_001, 60_000)}  # those holding 30 s or 90 s
    rows = [row for _, row in reader.read_states("url_windows")]
    assert rows and {row.key for row in rows} == {"/a"}
    assert {tuple(row.namespace) for row in rows} == windows
    timers = list(reader.timers("url_windows"))
    assert {(tuple(t.namespace), t.timestamp) for t in timers} == {(w, w[1] - 1) for w in windows}
    assert rows[0].to_json()["namespace"] == list(rows[0].namespace)
