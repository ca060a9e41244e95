"""The changelog service's truncation logic: what retained checkpoints, savepoints and
materializations let it truncate, per partition (pure, no broker)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from protocol_builders import (
    MAX_PARALLELISM,
    checkpoint_discarded,
    checkpoint_metadata,
    job_registration,
    materialization,
    task_assignments,
)
from tidemark.changelog.changelog_topics import changelog_partition_count, changelog_specs
from tidemark.changelog.truncation import ChangelogLedger, advances
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.types import (
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    OperatorId,
    SequenceNumber,
    task_id,
)

NAMES = TopicNames("tm")
JOB = JobId("orders")
OP = OperatorId("counts")
TOPIC = NAMES.changelog(JOB, OP)
MAX_P = MAX_PARALLELISM


def tasks(parallelism: int) -> tuple[TaskAssignment, ...]:
    return task_assignments(OP, parallelism)


def registration(parallelism: int = 2, epoch: int = 1, partitions: int = 4) -> JobRegistration:
    return job_registration(JOB, tasks(parallelism), epoch=epoch, changelog_partitions=partitions)


def ranges(spans: dict[int, tuple[int, int]]) -> tuple[ChangelogRange, ...]:
    return tuple(ChangelogRange(TOPIC, p, SequenceNumber(s), SequenceNumber(e)) for p, (s, e) in spans.items())


def snapshot(index: int, spans: dict[int, tuple[int, int]], parallelism: int = 2) -> TaskSnapshot:
    t = tasks(parallelism)[index]
    return TaskSnapshot(t.task_id, OP, index, t.key_group_start, t.key_group_end, changelog_ranges=ranges(spans))


def checkpoint(cid: int, *snapshots: TaskSnapshot, kind: CheckpointType = CheckpointType.CHECKPOINT) -> CheckpointMetadata:
    return checkpoint_metadata(JOB, cid, snapshots, kind=kind)


def discarded(cid: int, reason: str = "retention") -> CheckpointDiscarded:
    return checkpoint_discarded(JOB, cid, reason)


def materialized(index: int, cid: int, spans: dict[int, tuple[int, int]],
                 status: MaterializationStatus = MaterializationStatus.COMPLETED) -> MaterializationEvent:
    return materialization(JOB, task_id(OP, index), OP, cid, cid, ranges(spans), status=status)


def points(ledger: ChangelogLedger, partitions: int = 4) -> dict[int, int | None]:
    return {p.partition: p.point for p in ledger.plan({TOPIC: partitions})}


def ledger_of(*messages: object) -> ChangelogLedger:
    ledger = ChangelogLedger(NAMES)
    for message in messages:
        ledger.apply(message)
    return ledger


def test_nothing_is_planned_without_a_registration_or_before_the_topic_exists() -> None:
    assert ledger_of(checkpoint(1, snapshot(0, {0: (0, 10)}))).plan({TOPIC: 4}) == []
    assert ledger_of(registration()).plan({}) == []


def test_no_partition_is_truncated_before_its_tasks_materialized() -> None:
    ledger = ledger_of(registration(), checkpoint(1, snapshot(0, {0: (0, 10)}), snapshot(1, {2: (0, 7)})))
    assert points(ledger) == {0: None, 1: None, 2: None, 3: None}


def test_retained_ranges_and_materializations_bound_each_partition() -> None:
    ledger = ledger_of(
        registration(),
        checkpoint(1, snapshot(0, {0: (0, 100), 1: (0, 90)}), snapshot(1, {2: (0, 50)})),
        materialized(0, 1, {0: (0, 100), 1: (0, 90)}),
    )
    assert points(ledger) == {0: 0, 1: 0, 2: None, 3: None}  # checkpoint 1 still needs [0, ...)
    ledger.apply(checkpoint(2, snapshot(0, {0: (100, 130), 1: (90, 95)}), snapshot(1, {2: (0, 80)})))
    ledger.apply(discarded(1))
    assert points(ledger) == {0: 100, 1: 90, 2: None, 3: None}
    plan = {p.partition: p for p in ledger.plan({TOPIC: 4})}
    assert (plan[0].materialized, plan[0].referenced) == (100, 100)


def test_the_next_checkpoints_of_a_task_are_protected_before_any_is_retained() -> None:
    """A materialization alone bounds the point: the task's later records come after it."""
    ledger = ledger_of(registration(), materialized(0, 3, {0: (40, 100), 1: (0, 90)}))
    assert points(ledger)[0] == 100 and points(ledger)[1] == 90


def test_a_partition_shared_by_two_tasks_waits_for_both() -> None:
    ledger = ledger_of(registration(partitions=3), materialized(0, 1, {0: (0, 50), 1: (0, 70)}))
    assert points(ledger, 3) == {0: 50, 1: None, 2: None}  # partition 1 holds key groups of both
    ledger.apply(materialized(1, 1, {1: (3, 40), 2: (0, 9)}))
    assert points(ledger, 3) == {0: 50, 1: 40, 2: 9}


def test_a_savepoint_older_than_several_materializations_keeps_its_ranges() -> None:
    ledger = ledger_of(registration(), checkpoint(5, snapshot(0, {0: (20, 60)}), kind=CheckpointType.SAVEPOINT))
    for cid in range(6, 12):  # materializations and checkpoints move on; older ones are discarded
        end = 60 + 30 * (cid - 5)
        ledger.apply(materialized(0, cid, {0: (end - 30, end)}))
        ledger.apply(checkpoint(cid + 1, snapshot(0, {0: (end, end + 30)})))
        ledger.apply(discarded(cid))
        assert points(ledger)[0] == 20
    ledger.apply(discarded(5))  # the savepoint is deleted
    assert points(ledger)[0] == 240


def test_discards_and_rejections_are_idempotent() -> None:
    ledger = ledger_of(registration(), materialized(0, 1, {0: (0, 100)}))
    ledger.apply(discarded(3, "rejected: missing state files"))
    assert not ledger.apply(checkpoint(3, snapshot(0, {0: (10, 20)})))  # never retained after it
    assert points(ledger)[0] == 100
    ledger.apply(checkpoint(4, snapshot(0, {0: (10, 20)})))
    assert not ledger.apply(checkpoint(4, snapshot(0, {0: (10, 20)})))
    assert points(ledger)[0] == 10
    assert ledger.apply(discarded(4)) and not ledger.apply(discarded(4))
    assert points(ledger)[0] == 100


def test_failed_and_older_materializations_never_lower_the_bound() -> None:
    ledger = ledger_of(registration(), materialized(0, 2, {0: (0, 100)}))
    assert not ledger.apply(materialized(0, 3, {0: (0, 500)}, MaterializationStatus.FAILED))
    assert not ledger.apply(materialized(0, 1, {0: (0, 40)}))
    assert points(ledger)[0] == 100
    assert ledger.materializations[(JOB, task_id(OP, 0))].checkpoint_id == 2


def test_a_rescaled_attempt_waits_for_its_new_tasks_and_late_old_registrations_are_ignored() -> None:
    ledger = ledger_of(registration(), materialized(0, 1, {0: (0, 100), 1: (0, 90)}),
                       materialized(1, 1, {2: (0, 80), 3: (0, 70)}))
    assert points(ledger) == {0: 100, 1: 90, 2: 80, 3: 70}
    ledger.apply(registration(parallelism=3, epoch=2))  # key groups 0-41, 42-83, 84-127
    # partition 1 (32-63) now also holds task 1's key groups, partitions 2 and 3 task 2's (new):
    # neither has materialized there yet
    assert points(ledger) == {0: 100, 1: None, 2: None, 3: None}
    assert not ledger.apply(registration(parallelism=2, epoch=1))
    assert [t.task_id for t in ledger.topics()[0].tasks] == [task_id(OP, i) for i in range(3)]


def test_advances_only_move_points_forward() -> None:
    ledger = ledger_of(registration(), materialized(0, 1, {0: (0, 100), 1: (0, 90)}))
    plans = ledger.plan({TOPIC: 4})
    assert advances(plans, {}) == {(TOPIC, 0): 100, (TOPIC, 1): 90}
    assert advances(plans, {(TOPIC, 0): 100, (TOPIC, 1): 95}) == {}


def test_changelog_topics_come_from_registrations() -> None:
    reg = registration(partitions=0)
    assert changelog_partition_count(reg, 8) == 8
    assert changelog_partition_count(registration(partitions=500), 8) == MAX_P
    (spec,) = changelog_specs(reg, NAMES, 16)
    assert (spec.name, spec.partitions, spec.config["cleanup.policy"]) == (TOPIC, 16, "delete")
    v1 = JobRegistration(JOB, Epoch(1), CheckpointingMode.EXACTLY_ONCE, MAX_P, tasks(2), (), 0)
    assert changelog_specs(v1, NAMES, 8) == []


# --------------------------------------------------------------------------- property

_event = st.one_of(
    st.tuples(st.just("checkpoint"), st.integers(1, 30), st.integers(0, 1), st.integers(0, 3),
              st.integers(0, 400), st.integers(1, 60), st.booleans()),
    st.tuples(st.just("discard"), st.integers(1, 30)),
    st.tuples(st.just("materialized"), st.integers(1, 30), st.integers(0, 1), st.integers(0, 3),
              st.integers(0, 400), st.integers(1, 60)),
)


def _messages(events: list[tuple]) -> list[object]:
    messages: list[object] = [registration()]
    for event in events:
        if event[0] == "discard":
            messages.append(discarded(event[1]))
            continue
        cid, index, partition, start, length = event[1:6]
        if partition // 2 != index:  # task i writes partitions 2i and 2i + 1
            continue
        spans = {partition: (start, start + length)}
        if event[0] == "checkpoint":
            kind = CheckpointType.SAVEPOINT if event[6] else CheckpointType.CHECKPOINT
            messages.append(checkpoint(cid, snapshot(index, spans), kind=kind))
        else:
            messages.append(materialized(index, cid, spans))
    return messages


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, max_size=40))
def test_no_point_passes_a_retained_range_start_or_what_its_writer_materialized(events: list[tuple]) -> None:
    """Invariant 4, whatever the records: a retained checkpoint's or savepoint's range is never
    truncated below its start, no partition passes what its writer's materializations covered
    (nor is truncated before they covered it), and the same records plan the same points."""
    messages = _messages(events)
    ledger = ledger_of(*messages)
    covered: dict[int, int] = {}
    for m in messages:
        if isinstance(m, MaterializationEvent):
            for r in m.covered_ranges:
                covered[r.partition] = max(covered.get(r.partition, 0), r.end_offset)
    for plan in ledger.plan({TOPIC: 4}):
        point = plan.point
        if plan.partition not in covered:
            assert point is None
            continue
        assert point is not None and point <= covered[plan.partition]
        for metadata in ledger.retained(JOB):
            for r in (r for t in metadata.tasks for r in t.changelog_ranges):
                if r.partition == plan.partition:
                    assert point <= r.start_offset
    assert ledger_of(*messages).plan({TOPIC: 4}) == ledger.plan({TOPIC: 4})


def test_hostile_registrations_and_topics_plan_nothing() -> None:
    bad = JobRegistration(JOB, Epoch(9), CheckpointingMode.EXACTLY_ONCE, 0, tasks(2), (), 0,
                          changelog_operators=(OP,))
    assert not ledger_of(bad).registrations
    ledger = ledger_of(registration(), materialized(0, 1, {0: (0, 5)}))
    assert ledger.plan({TOPIC: MAX_P + 1}) == []  # more partitions than key groups: not ours
