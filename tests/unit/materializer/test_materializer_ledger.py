"""Which task checkpoints the materializer folds, and the ids it gives materializations (pure)."""

from __future__ import annotations

from protocol_builders import checkpoint_metadata, job_registration, materialization, task_assignments
from tidemark.materializer import MaterializerLedger
from tidemark.protocol.messages import (
    ChangelogRange,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskSnapshot,
)
from tidemark.types import (
    CheckpointType,
    JobId,
    OperatorId,
    SequenceNumber,
    TaskId,
)

JOB = JobId("orders")
OP = OperatorId("counts")
RANGE = ChangelogRange("tm.changelog.orders.counts", 0, SequenceNumber(0), SequenceNumber(9))


TASKS = task_assignments(OP, 2)


def task(index: int, *, ranges: bool = True) -> TaskSnapshot:
    t = TASKS[index]
    return TaskSnapshot(t.task_id, OP, index, t.key_group_start, t.key_group_end,
                        changelog_ranges=(RANGE,) if ranges else ())


def completed(cid: int, *tasks: TaskSnapshot, epoch: int = 1,
              kind: CheckpointType = CheckpointType.CHECKPOINT) -> CheckpointMetadata:
    return checkpoint_metadata(JOB, cid, tasks, epoch=epoch, kind=kind)


def registered(epoch: int, finished: bool = False) -> JobRegistration:
    return job_registration(JOB, TASKS, epoch=epoch, finished=finished)


def event(index: int, cid: int, mid: int, status=MaterializationStatus.COMPLETED, at: int = 5) -> MaterializationEvent:
    return materialization(JOB, TASKS[index].task_id, OP, cid, mid, (RANGE,), status=status, at=at)


def ledger_of(*messages: object) -> MaterializerLedger:
    ledger = MaterializerLedger()
    for message in messages:
        ledger.apply(message)
    return ledger


def test_the_newest_completed_checkpoint_of_each_changelog_task_is_a_candidate() -> None:
    ledger = ledger_of(registered(1), completed(2, task(0), task(1)), completed(1, task(0)),
                       completed(3, task(0, ranges=False)))
    found = {(c.task.task_id, c.checkpoint_id) for c in ledger.candidates()}
    assert found == {("counts#0", 2), ("counts#1", 2)}  # 3 has no ranges: not in changelog mode


def test_savepoints_other_attempts_and_finished_jobs_are_not_candidates() -> None:
    assert ledger_of(completed(5, task(0), kind=CheckpointType.SAVEPOINT)).candidates() == []
    assert ledger_of(registered(2), completed(5, task(0), epoch=1)).candidates() == []
    assert ledger_of(registered(1, finished=True), completed(5, task(0))).candidates() == []
    assert len(ledger_of(completed(5, task(0))).candidates()) == 1  # no registration seen: trusted


def test_a_materialized_checkpoint_is_done_until_a_newer_one_completes() -> None:
    ledger = ledger_of(registered(1), completed(4, task(0)), event(0, 4, 7))
    assert ledger.candidates() == []
    ledger.apply(event(0, 4, 8, MaterializationStatus.FAILED))
    ledger.apply(completed(5, task(0)))
    assert [c.checkpoint_id for c in ledger.candidates()] == [5]
    assert ledger.materialized[(JOB, TaskId("counts#0"))].materialization_id == 7


def test_materialization_ids_increase_and_stay_unique_without_the_log() -> None:
    ledger = ledger_of(event(0, 4, 1_000))
    key = (JOB, TaskId("counts#0"))
    assert ledger.next_materialization_id(key, 50) == 1_001
    assert ledger.next_materialization_id(key, 50) == 1_002
    assert ledger.next_materialization_id(key, 9_000) == 9_000  # the clock when it is ahead


def test_tasks_of_current_attempts() -> None:
    assert ledger_of(registered(1)).tasks_of_current_attempts() == {(JOB, TaskId("counts#0")),
                                                                     (JOB, TaskId("counts#1"))}
    assert ledger_of(registered(1, finished=True)).tasks_of_current_attempts() == set()
