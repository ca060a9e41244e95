"""How a replica gets from the checkpoint it holds to a newer one: extend or rebuild (pure)."""

from __future__ import annotations

from tidemark.materializer import Current, Extend, Rebuild, ReplicaLineage, TaskCheckpoint, plan_fold
from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationRef,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.types import (
    CheckpointId,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

TOPIC = "tm.changelog.orders.counts"
HANDLE = StateHandle(StateHandleKind.KEYED_INCREMENTAL, OperatorId("counts"), KeyGroup(0), KeyGroup(63), (), 10, 10)


def r(partition: int, start: int, end: int, topic: str = TOPIC) -> ChangelogRange:
    return ChangelogRange(topic, partition, SequenceNumber(start), SequenceNumber(end))


def at(cid: int, *ranges: ChangelogRange, epoch: int = 1, materialization: int | None = None,
       handles: tuple[StateHandle, ...] = (), end_kg: int = 63) -> TaskCheckpoint:
    ref = None if materialization is None else MaterializationRef(MaterializationId(materialization), CheckpointId(2))
    task = TaskSnapshot(TaskId("counts#0"), OperatorId("counts"), 0, KeyGroup(0), KeyGroup(end_kg),
                        state_handles=handles, changelog_ranges=ranges, materialization=ref)
    return TaskCheckpoint(JobId("orders"), CheckpointId(cid), Epoch(epoch), 128, task)


HELD = ReplicaLineage(at(3, r(0, 10, 50), r(1, 5, 20)))


def test_no_replica_or_another_attempt_task_or_range_rebuilds() -> None:
    assert isinstance(plan_fold(None, at(1, r(0, 0, 5))), Rebuild)
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 60), epoch=2)), Rebuild)
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 60), r(1, 5, 20), end_kg=31)), Rebuild)
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 60), r(1, 5, 20), r(2, 0, 3, topic="other"))), Rebuild)


def test_the_held_checkpoint_is_current_and_an_older_one_rebuilds() -> None:
    assert isinstance(plan_fold(HELD, HELD.checkpoint), Current)
    assert isinstance(plan_fold(HELD, at(2, r(0, 10, 40))), Rebuild)


def test_longer_ranges_on_the_same_base_extend_from_the_held_ends() -> None:
    plan = plan_fold(HELD, at(4, r(0, 10, 70), r(1, 5, 20), r(3, 100, 110)))
    assert plan == Extend({(TOPIC, 0): 50, (TOPIC, 1): 20})


def test_a_held_range_that_is_not_extended_rebuilds() -> None:
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 70))), Rebuild)  # partition 1 vanished
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 45), r(1, 5, 20))), Rebuild)  # shorter
    assert isinstance(plan_fold(HELD, at(4, r(0, 10, 70), r(1, 5, 20), handles=(HANDLE,))), Rebuild)


def test_rebasing_on_a_materialization_this_replica_produced_extends() -> None:
    produced = HELD.with_produced(MaterializationId(9))
    rebased = at(4, r(0, 30, 80), r(1, 12, 25), materialization=9, handles=(HANDLE,))
    assert plan_fold(produced, rebased) == Extend({(TOPIC, 0): 50, (TOPIC, 1): 20})
    assert isinstance(plan_fold(HELD, rebased), Rebuild)  # not produced here: unknown base
    assert isinstance(plan_fold(produced, at(4, r(0, 60, 80), r(1, 12, 25), materialization=9)), Extend)
    straddling = at(4, r(0, 30, 45), r(1, 12, 25), materialization=9)  # ends before what was read
    assert isinstance(plan_fold(produced, straddling), Rebuild)


def test_the_lineage_moves_with_each_fold() -> None:
    lineage = HELD.with_produced(MaterializationId(1)).at(at(4, r(0, 10, 70), r(1, 5, 20)))
    assert lineage.checkpoint.checkpoint_id == 4 and lineage.produced == {1}
