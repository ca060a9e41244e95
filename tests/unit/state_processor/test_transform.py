"""Deriving savepoints: a stage renamed (its files copied, restored by a stage of the new name),
removed, a state mapped, added, replaced or removed, the max parallelism changed; from savepoints
and from incremental and changelog-backed checkpoints; operator state and source positions carried;
one-line errors for a stage or state named wrongly."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.protocol.messages import SourceOffset, StateHandleKind
from tidemark.state import ValueStateDescriptor
from tidemark.state_processor import (MapState, RemoveStage, RemoveState, RenameStage, SetState, StateReader,
                                      UnknownStage, UnknownState, open_source, transform_savepoint)
from tidemark.state_processor.bootstrap import StateData
from tidemark.state_processor.source import StateSourceError
from tidemark.testing.changelog import InMemoryChangelogReader, InMemoryChangelogTopic
from tidemark.testing import KeyedProcessFunctionHarness as Harness
from tidemark.testing.harness import HarnessSnapshot

from state_processor_stage import COUNT, STAGE, Profile, harness, keyed_state_of, request

pytestmark = pytest.mark.unit
KEYS = [f"10.0.0.{i}" for i in range(17)]


def snapshot_of(backend: str = "heap", savepoint: bool = True, topic: InMemoryChangelogTopic | None = None,
                **options: Any) -> tuple[HarnessSnapshot, dict[str, dict[str, Any]], dict[str, list[int]]]:
    with harness(backend, 2, topic, **options) as h:
        h.process_all(request(i) for i in range(40))
        snapshot = h.snapshot(savepoint=savepoint)
        h.notify_checkpoint_complete(snapshot.metadata.checkpoint_id)
        return snapshot, keyed_state_of(h, KEYS), {key: h.timers(key) for key in KEYS}


def renamed_harness(name: str, storage: Any) -> Harness:
    """The test stage under another name (a job whose stage was renamed)."""
    return Harness.for_function(Profile, lambda v: v["ip"], name=name, parallelism=3, state_backend="heap",
                                job_id="profiles", storage=storage)


def test_a_renamed_stage_is_restored_by_a_stage_of_the_new_name_its_files_copied() -> None:
    snapshot, state, timers = snapshot_of()
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    progress: list[str] = []
    written = transform_savepoint(source, [RenameStage(STAGE, "client_profile")], progress=progress.append)
    assert progress == ["stage client_profile: 2 tasks copied"]
    assert written.metadata.checkpoint_id == snapshot.metadata.checkpoint_id
    assert [t.task_id for t in written.metadata.tasks] == ["client_profile#0", "client_profile#1"]
    old_files = {f.path: f for t in snapshot.metadata.tasks for h in t.state_handles for f in h.files}
    new_files = [f for t in written.metadata.tasks for h in t.state_handles for f in h.files]
    assert all(f.path.startswith(written.directory + "/client_profile/") for f in new_files)
    assert sorted(f.sha256 for f in new_files) == sorted(f.sha256 for f in old_files.values())
    assert all(h.operator_id == "client_profile" for t in written.metadata.tasks for h in t.state_handles)
    h = renamed_harness("client_profile", snapshot.storage)
    with h.restore_path(snapshot.storage, written.path):
        assert keyed_state_of(h, KEYS) == state
        assert {key: h.timers(key) for key in KEYS} == timers
    seen = [r.value for r in StateReader.open(snapshot.storage, "profiles", path=written.path)
            .operator_state("client_profile") if r.state == "seen"]
    assert sorted(seen) == sorted(request(i)["ip"] for i in range(40))


@pytest.mark.parametrize(("backend", "savepoint", "logged"), [
    ("heap", True, False), ("rocksdb", True, False), ("rocksdb", False, False), ("heap", False, True)])
def test_mapped_added_and_removed_states_at_another_max_parallelism(backend: str, savepoint: bool,
                                                                    logged: bool) -> None:
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2) if logged else None
    changelog = (lambda task: InMemoryChangelogReader(topic, max_parallelism=128)) if topic else None
    snapshot, state, timers = snapshot_of(backend, savepoint, topic)
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    extra = ValueStateDescriptor("tier")
    written = transform_savepoint(source, [
        MapState(STAGE, "count", lambda key, count: count * 10),
        MapState(STAGE, "by_method", lambda key, hits: None if hits < 2 else hits),  # a map entry removed
        RemoveState(STAGE, "statuses"),
        SetState(STAGE, StateData(extra, [(k, "gold") for k in KEYS[:5]])),
    ], max_parallelism=64, parallelism=3, changelog=changelog)
    assert written.metadata.max_parallelism == 64
    assert [(t.task_id, t.key_group_start, t.key_group_end) for t in written.metadata.tasks] == [
        ("profile#0", 0, 21), ("profile#1", 22, 42), ("profile#2", 43, 63)]
    assert all(h.kind in (StateHandleKind.KEYED_FULL, StateHandleKind.OPERATOR)
               for t in written.metadata.tasks for h in t.state_handles)
    reader = StateReader.open(snapshot.storage, "profiles", path=written.path)
    assert reader.state_names(STAGE) == ["average_bytes", "by_method", "count", "last_seen", "tier", "total_bytes"]
    h = harness(backend, 2, storage=snapshot.storage, max_parallelism=64)
    with h.restore_path(snapshot.storage, written.path):
        after = keyed_state_of(h, KEYS)
        assert after["count"] == {k: v * 10 for k, v in state["count"].items()}
        assert after["by_method"] == {k: {m: n for m, n in v.items() if n >= 2} for k, v in state["by_method"].items()}
        assert after["statuses"] == {k: [] for k in KEYS}
        for name in ("last_seen", "total_bytes", "average_bytes"):
            assert after[name] == state[name]
        assert {k: h.state(extra, k).value() for k in KEYS} == {k: "gold" if k in KEYS[:5] else None for k in KEYS}
        assert {key: h.timers(key) for key in KEYS} == timers
    seen = [r.value for r in reader.operator_state(STAGE) if r.state == "seen"]
    assert sorted(seen) == sorted(request(i)["ip"] for i in range(40))


def test_a_removed_stage_leaves_the_others_and_their_positions() -> None:
    snapshot, state, _ = snapshot_of()
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    other = transform_savepoint(source, [SetState("ranking", StateData(COUNT, [("a", 1), ("b", 2)]))])
    assert sorted({t.operator_id for t in other.metadata.tasks}) == ["profile", "ranking"]
    assert [t.task_id for t in other.metadata.tasks if t.operator_id == "ranking"] == ["ranking#0"]
    # a source position travels with its stage: put one on the harness's stage, as a source stage has
    from dataclasses import replace

    from tidemark.checkpoint_store.metadata_codec import encode_metadata

    with_offsets = replace(other.metadata, tasks=tuple(
        replace(t, source_offsets=(SourceOffset("access-log", t.subtask_index, 100 + t.subtask_index),))
        if t.operator_id == STAGE else t for t in other.metadata.tasks))
    snapshot.storage.write_bytes(other.path, encode_metadata(with_offsets))
    source = open_source(snapshot.storage, "profiles", path=other.path)
    removed = transform_savepoint(source, [RemoveStage("ranking"), MapState(STAGE, "count", lambda k, v: v)],
                                  parallelism=1)
    assert [t.task_id for t in removed.metadata.tasks] == ["profile#0"]
    assert sorted((o.partition, o.offset) for o in removed.metadata.tasks[0].source_offsets) == [(0, 100), (1, 101)]
    reader = StateReader.open(snapshot.storage, "profiles", path=removed.path)
    assert {r.key: r.value for r in reader.read(STAGE, "count")} == state["count"]
    emptied = transform_savepoint(open_source(snapshot.storage, "profiles", path=removed.path),
                                  [RemoveStage(STAGE)])
    assert emptied.metadata.tasks == ()


def test_operations_apply_in_order_and_name_stages_as_they_are_then() -> None:
    snapshot, state, _ = snapshot_of()
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    written = transform_savepoint(source, [RenameStage(STAGE, "a"), MapState("a", "count", lambda k, v: v + 1),
                                           RenameStage("a", "b"), MapState("b", "count", lambda k, v: v * 2)])
    reader = StateReader.open(snapshot.storage, "profiles", path=written.path)
    assert {r.key: r.value for r in reader.read("b", "count")} == {k: (v + 1) * 2 for k, v in state["count"].items()}


@pytest.mark.parametrize(("operations", "error", "message"), [
    ([RemoveStage("nope")], UnknownStage, "has no stage 'nope'; its stages: profile"),
    ([RenameStage(STAGE, "x"), RemoveStage(STAGE)], UnknownStage,
     "has no stage 'profile' after the operations before; its stages after the operations before: x"),
    ([RenameStage(STAGE, "x"), MapState(STAGE, "count", abs)], UnknownStage, "has no stage 'profile'"),
    ([MapState(STAGE, "nope", abs)], UnknownState, "stage 'profile' has no keyed state 'nope'"),
    ([RemoveState(STAGE, "count"), MapState(STAGE, "count", abs)], UnknownState, "no keyed state 'count'"),
    ([SetState("other", StateData(COUNT, [])), RenameStage(STAGE, "other")], StateSourceError,
     "cannot rename stage 'profile' to 'other': that stage exists"),
    ([SetState(STAGE, StateData(COUNT, [])), MapState(STAGE, "count", abs)], StateSourceError,
     "is written by this transform"),
    ([RenameStage(STAGE, "x.read")], StateSourceError, "'x.read' cannot name a stage"),
    ([SetState("profile.read", StateData(COUNT, []))], StateSourceError, "'profile.read' cannot name a stage"),
])
def test_a_stage_or_state_named_wrongly_is_a_one_line_error_and_nothing_is_written(
        operations: list[Any], error: type[Exception], message: str) -> None:
    snapshot, _, _ = snapshot_of()
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    before = set(snapshot.storage.list("profiles/"))
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        transform_savepoint(source, operations)
    assert len(str(raised.value).splitlines()) == 1
    assert set(snapshot.storage.list("profiles/")) == before


def test_a_map_that_fails_leaves_nothing() -> None:
    snapshot, _, _ = snapshot_of()
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    before = set(snapshot.storage.list("profiles/"))
    with pytest.raises(ZeroDivisionError):
        transform_savepoint(source, [MapState(STAGE, "count", lambda k, v: v / 0)])
    assert set(snapshot.storage.list("profiles/")) == before


@pytest.mark.parametrize(("backend", "savepoint", "logged"), [
    ("heap", True, False), ("rocksdb", False, False), ("heap", False, True)])
def test_a_stage_rescaled_under_the_same_max_parallelism_is_written_one_new_task_at_a_time(
        backend: str, savepoint: bool, logged: bool) -> None:
    topic = InMemoryChangelogTopic("profiles.changelog", partitions=2) if logged else None
    changelog = (lambda task: InMemoryChangelogReader(topic, max_parallelism=128)) if topic else None
    snapshot, state, timers = snapshot_of(backend, savepoint, topic)
    source = open_source(snapshot.storage, "profiles", path=snapshot.path)
    progress: list[str] = []
    written = transform_savepoint(source, [MapState(STAGE, "count", lambda key, count: count + 1),
                                           RemoveState(STAGE, "statuses")], parallelism=3, changelog=changelog,
                                  progress=progress.append)
    assert [line.split(",")[0] for line in progress] == [f"stage {STAGE}: {i}/3 tasks written" for i in (1, 2, 3)]
    assert [(t.key_group_start, t.key_group_end) for t in written.metadata.tasks] == [(0, 42), (43, 85), (86, 127)]
    h = harness(backend, 2, storage=snapshot.storage)
    with h.restore_path(snapshot.storage, written.path):
        after = keyed_state_of(h, KEYS)
        assert after["count"] == {k: v + 1 for k, v in state["count"].items()}
        assert after["statuses"] == {k: [] for k in KEYS}
        for name in ("last_seen", "by_method", "total_bytes", "average_bytes"):
            assert after[name] == state[name]
        assert {key: h.timers(key) for key in KEYS} == timers
    seen = [r.value for r in StateReader.open(snapshot.storage, "profiles", path=written.path).operator_state(STAGE)
            if r.state == "seen"]
    assert sorted(seen) == sorted(request(i)["ip"] for i in range(40))
