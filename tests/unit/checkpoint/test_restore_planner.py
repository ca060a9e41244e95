"""Restore planning: key-group assignments and which state each new subtask restores."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.checkpoint import (
    OperatorStateMode,
    operator_state_file_name,
    operator_state_mode,
    plan_assignments,
    plan_restore,
)
from tidemark.keygroups import compute_key_group_range
from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointMetadata,
    MaterializationRef,
    SinkTransaction,
    SourceOffset,
    StateFile,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.types import (
    CheckpointId,
    CheckpointType,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    task_id,
)

MAX_P = 128


def _key_group_range(max_parallelism: int, parallelism: int, index: int) -> tuple[int, int]:
    key_groups = compute_key_group_range(max_parallelism, parallelism, index)
    return key_groups.start, key_groups.end


def test_key_group_range_follows_flinks_formula() -> None:
    assert [_key_group_range(128, 3, i) for i in range(3)] == [(0, 42), (43, 85), (86, 127)]
    assert [_key_group_range(10, 4, i) for i in range(4)] == [(0, 2), (3, 4), (5, 7), (8, 9)]
    assert _key_group_range(7, 7, 6) == (6, 6)
    for bad in ((128, 0, 0), (128, 129, 0), (128, 2, 2), (128, 2, -1)):
        with pytest.raises(ValueError):
            _key_group_range(*bad)


@given(st.integers(1, 512).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m))))
def test_assignments_cover_every_key_group_exactly_once(mp: tuple[int, int]) -> None:
    max_p, p = mp
    ranges = [(a.key_group_start, a.key_group_end) for a in plan_assignments((OperatorId("op"),), p, max_p)]
    covered = [kg for start, end in ranges for kg in range(start, end + 1)]
    assert covered == list(range(max_p))
    for i, r in enumerate(ranges):
        theirs = compute_key_group_range(max_p, p, i)
        assert (theirs.start, theirs.end) == r


def _file(path: str, shared: bool = False) -> StateFile:
    return StateFile(path, 1, "0" * 64, shared)


def _keyed(op: str, start: int, end: int, name: str) -> StateHandle:
    return StateHandle(StateHandleKind.KEYED_FULL, OperatorId(op), KeyGroup(start), KeyGroup(end),
                       (_file(f"job/chk-9/{name}"),), 100, 10)


def _operator(op: str, index: int, state: str, mode: OperatorStateMode) -> StateHandle:
    path = f"job/chk-9/{op}-{index}/{operator_state_file_name(state, mode)}"
    return StateHandle(StateHandleKind.OPERATOR, OperatorId(op), KeyGroup(-1), KeyGroup(-1),
                       (_file(path),), 10, 10)


def _metadata() -> CheckpointMetadata:
    tasks = []
    for i in range(2):  # keyed operator "agg" at parallelism 2
        start, end = _key_group_range(MAX_P, 2, i)
        tasks.append(TaskSnapshot(
            task_id(OperatorId("agg"), i), OperatorId("agg"), i, start, end,
            state_handles=(_keyed("agg", start, end, f"agg-{i}"),),
            changelog_ranges=(ChangelogRange("agg-changelog", i, SequenceNumber(5), SequenceNumber(9)),),
            materialization=MaterializationRef(MaterializationId(i + 1), CheckpointId(8)),
        ))
    for i in range(4):  # source at parallelism 4 with split, union and broadcast state
        start, end = _key_group_range(MAX_P, 4, i)
        tasks.append(TaskSnapshot(
            task_id(OperatorId("src"), i), OperatorId("src"), i, start, end,
            state_handles=(
                _operator("src", i, "splits", OperatorStateMode.SPLIT_DISTRIBUTE),
                _operator("src", i, "watermarks", OperatorStateMode.UNION),
                _operator("src", i, "config", OperatorStateMode.BROADCAST),
            ),
            source_offsets=(SourceOffset("in", 2 * i, 100 + i), SourceOffset("in", 2 * i + 1, 200 + i)),
            sink_transactions=(SinkTransaction(f"tx-{i}", i, 0),),
        ))
    return CheckpointMetadata(JobId("job"), CheckpointId(9), CheckpointType.CHECKPOINT, 1, 2, MAX_P,
                              tuple(tasks))


def test_keyed_state_goes_to_every_new_subtask_whose_range_intersects() -> None:
    plan = plan_restore(_metadata(), 3)
    assert plan.parallelism == 3 and len(plan.subtasks) == 6
    agg = [plan.for_task(task_id(OperatorId("agg"), i)) for i in range(3)]
    assert [(s.assignment.key_group_start, s.assignment.key_group_end) for s in agg] == [
        (0, 42), (43, 85), (86, 127)]
    names = [[h.files[0].path.rsplit("/", 1)[1] for h in s.keyed_handles] for s in agg]
    assert names == [["agg-0"], ["agg-0", "agg-1"], ["agg-1"]]
    assert [len(s.changelog_ranges) for s in agg] == [1, 2, 1]
    assert [m.materialization_id for m in agg[1].materializations] == [1, 2]
    assert [list(s.restored_from) for s in agg] == [["agg#0"], ["agg#0", "agg#1"], ["agg#1"]]
    assert all(s.operator_handles == () and s.source_offsets == () for s in agg)


def test_every_key_group_is_restored_by_its_owner() -> None:
    metadata = _metadata()
    for p in (1, 2, 3, 5, 128):
        for s in plan_restore(metadata, p).subtasks:
            if s.assignment.operator_id != "agg":
                continue
            for kg in range(s.assignment.key_group_start, s.assignment.key_group_end + 1):
                assert any(h.key_group_start <= kg <= h.key_group_end for h in s.keyed_handles)


def test_operator_state_is_split_unioned_or_broadcast_by_mode() -> None:
    plan = plan_restore(_metadata(), 3)
    src = [plan.for_task(task_id(OperatorId("src"), i)) for i in range(3)]
    by_mode = [
        {m: [h for h in s.operator_handles if operator_state_mode(h) is m] for m in OperatorStateMode}
        for s in src
    ]
    split = [[h.files[0].path.split("/")[2] for h in d[OperatorStateMode.SPLIT_DISTRIBUTE]] for d in by_mode]
    assert split == [["src-0", "src-3"], ["src-1"], ["src-2"]]
    assert all(len(d[OperatorStateMode.UNION]) == 4 for d in by_mode)
    assert all([h.files[0].path.split("/")[2] for h in d[OperatorStateMode.BROADCAST]] == ["src-0"]
               for d in by_mode)
    offsets = [[(o.topic, o.partition) for o in s.source_offsets] for s in src]
    assert offsets == [[("in", 0), ("in", 3), ("in", 6)], [("in", 1), ("in", 4), ("in", 7)],
                       [("in", 2), ("in", 5)]]
    assert [[t.transactional_id for t in s.sink_transactions] for s in src] == [
        ["tx-0", "tx-3"], ["tx-1"], ["tx-2"]]


def test_plans_are_deterministic_and_assignments_match_the_coordinators() -> None:
    metadata = _metadata()
    assert plan_restore(metadata, 3) == plan_restore(metadata, 3)
    ops = (OperatorId("agg"), OperatorId("src"))
    assert plan_restore(metadata, 3).assignments == plan_assignments(ops, 3, MAX_P)


def test_operator_state_mode_is_read_from_file_names() -> None:
    assert operator_state_file_name("offsets", OperatorStateMode.UNION, 2) == "offsets.2.opstate-union"
    plain = StateHandle(StateHandleKind.OPERATOR, OperatorId("o"), KeyGroup(-1), KeyGroup(-1),
                        (_file("x/legacy.bin"),), 1, 1)
    assert operator_state_mode(plain) is OperatorStateMode.SPLIT_DISTRIBUTE
    mixed = StateHandle(StateHandleKind.OPERATOR, OperatorId("o"), KeyGroup(-1), KeyGroup(-1),
                        (_file("x/a.0.opstate-union"), _file("x/b.0.opstate-broadcast")), 1, 1)
    with pytest.raises(ValueError):
        operator_state_mode(mixed)
    with pytest.raises(ValueError):
        operator_state_mode(_keyed("o", 0, 1, "k"))
    with pytest.raises(ValueError):
        operator_state_file_name("a/b", OperatorStateMode.SPLIT_DISTRIBUTE)
