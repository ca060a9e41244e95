"""The job state machine: CREATED, RUNNING, RESTARTING, SUSPENDED, FINISHED, CANCELLED, FAILED and why,
from the coordinator's records only (so a coordinator rebuilt from its topics says the same)."""

from __future__ import annotations

from dataclasses import replace

from checkpoint_support import JOB, ack, ack_all, registration, records_written, savepoint_request

from tidemark.checkpoint import (
    AbortReason,
    AttemptOutcome,
    CheckpointCoordinator,
    CheckpointingOptions,
    EmitAborted,
    JobState,
    JobStatus,
    PersistCheckpoint,
    RestoreRequest,
)
from tidemark.protocol.messages import AttemptFailed, JobRegistration
from tidemark.types import Epoch

OPTS = CheckpointingOptions(interval_ms=100, timeout_ms=1_000, tolerable_failures=0)


def ended(reg: JobRegistration, outcome: AttemptOutcome, reason: str, at: int) -> JobRegistration:
    return replace(reg, finished=True, outcome=outcome.value, reason=reason, registered_at=at)


def rebuilt_from(records: list[object], now: int) -> CheckpointCoordinator:
    coord = CheckpointCoordinator(JOB, OPTS)
    coord.replay(records, now)
    return coord


def test_created_then_running_then_suspended_by_stop_with_savepoint() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    assert coord.state == "CREATED" and coord.status.reason is None
    reg = registration()
    coord.apply(replace(reg, tasks=()), 0)  # announced (changelog mode): stages still starting
    assert coord.status.state is JobState.CREATED
    coord.apply(reg, 10)
    assert coord.status.state is JobState.RUNNING
    coord.apply(savepoint_request("stop", 20, stop=True), 20)
    (persist,) = ack_all(coord, reg, 1, 30)
    coord.apply(persist.metadata, 40)
    assert coord.status == JobStatus(JobState.SUSPENDED, "stopped with a savepoint; a start resumes it")
    coord.apply(ended(reg, AttemptOutcome.FINISHED, "", 50), 50)  # the supervisor saw every worker exit 0
    assert coord.status.state is JobState.SUSPENDED and coord.suspended_generation is None


def test_a_stop_for_a_deployment_generation_suspends_the_job_for_it_until_a_newer_attempt_registers() -> None:
    coord, written = CheckpointCoordinator(JOB, OPTS), []
    reg = registration()

    def feed(record: object, at: int) -> list[object]:
        commands = coord.apply(record, at)
        written.extend([record, *records_written(commands)])
        return commands

    def checkpoint(cid: int, at: int) -> None:
        commands = [c for task in reg.tasks for c in feed(ack(cid, task, at, reg.epoch), at)]
        (persist,) = [c for c in commands if isinstance(c, PersistCheckpoint)]
        feed(persist.metadata, at + 1)  # the checkpoint-store's confirmation

    feed(reg, 0)
    feed(savepoint_request("plain", 10, generation=9), 10)  # not a stop: suspends nothing
    checkpoint(1, 20)
    assert coord.status.state is JobState.RUNNING and coord.suspended_generation is None
    feed(savepoint_request("upgrade", 40, stop=True, generation=7), 40)
    checkpoint(2, 50)
    feed(ended(reg, AttemptOutcome.FINISHED, "", 70), 70)
    suspended = JobStatus(JobState.SUSPENDED, "stopped with a savepoint for generation 7; a start of generation 7 "
                                              "or newer resumes it")
    assert (coord.status, coord.suspended_generation) == (suspended, 7)
    rebuilt = rebuilt_from(written, 100)
    assert (rebuilt.status, rebuilt.suspended_generation) == (suspended, 7)
    feed(registration(epoch=1, at=80), 80)  # resumed
    assert coord.status.state is JobState.RUNNING and coord.suspended_generation is None


def test_cancel_aborts_pending_checkpoints_and_a_later_timeout_never_fails_the_job() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    reg = registration()
    coord.apply(reg, 0)
    trigger = coord.tick(100)
    assert coord.pending_checkpoint_ids == (1,)
    commands = coord.apply(ended(reg, AttemptOutcome.CANCELLED, "cancelled: the supervisor got SIGTERM", 200), 200)
    (aborted,) = [c for c in commands if isinstance(c, EmitAborted)]
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.JOB_FINISHED
    assert "cancelled" in aborted.aborted.reason
    assert coord.pending_checkpoint_ids == ()
    assert coord.tick(5_000) == [] and coord.tick(60_000) == []  # long past the 1 s timeout
    assert coord.consecutive_failures == 0 and not coord.attempt_failed
    assert coord.status.state is JobState.CANCELLED
    assert coord.status.reason == "cancelled: the supervisor got SIGTERM"
    assert coord.stats().counts.failed == 1  # the aborted checkpoint shows in history, not as a job failure
    records = [reg, *records_written(trigger), *records_written(commands)]
    records.insert(2, ended(reg, AttemptOutcome.CANCELLED, "cancelled: the supervisor got SIGTERM", 200))
    assert rebuilt_from(records, 70_000).status.state is JobState.CANCELLED


def test_restarting_after_the_failure_policy_then_running_again() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    reg = registration()
    coord.apply(reg, 0)
    coord.tick(100)
    coord.tick(1_200)  # the checkpoint times out; tolerance 0: the attempt fails over
    status = coord.status
    assert status.state is JobState.RESTARTING
    assert "1 consecutive checkpoint failures exceed the tolerable 0" in (status.reason or "")
    coord.apply(registration(epoch=1, at=2_000), 2_000)
    assert coord.status.state is JobState.RUNNING and coord.status.reason is None


def test_restarting_while_a_stage_failure_is_restored_by_the_supervisor() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    reg = registration()
    coord.apply(reg, 0)
    coord.tick(100)
    (persist,) = ack_all(coord, reg, 1, 110)
    coord.apply(persist.metadata, 120)
    coord.apply(ended(reg, AttemptOutcome.RESTARTING, "stage agg exited with code 1", 200), 200)
    assert (coord.state, coord.status.reason) == ("RESTARTING", "stage agg exited with code 1")
    assert coord.tick(10_000) == []  # nothing is triggered for the ended attempt
    request = RestoreRequest("r", persist.metadata, persist.metadata_path, parallelism=2, requested_at=300)
    coord.request_restore(request, 300)
    assert (coord.state, coord.status.reason) == ("RESTARTING", "restoring checkpoint 1 as attempt 1")
    coord.apply(registration(epoch=1, at=400), 400)
    assert coord.state == "RUNNING"


def test_failed_with_its_reason_survives_a_rebuild() -> None:
    reg = registration(epoch=3)
    failed = ended(reg, AttemptOutcome.FAILED, "input topic 'orders' does not exist", 10)
    coord = rebuilt_from([reg, failed], 20)
    assert (coord.state, coord.status.reason) == ("FAILED", "input topic 'orders' does not exist")
    assert coord.tick(10_000) == []


def test_an_older_attempts_ending_does_not_change_the_newer_attempts_state() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    old, new = registration(epoch=1), registration(epoch=2, at=5)
    coord.apply(old, 0)
    coord.apply(new, 5)
    coord.apply(ended(old, AttemptOutcome.CANCELLED, "late", 10), 10)
    assert coord.status.state is JobState.RUNNING
    coord.apply(AttemptFailed(JOB, Epoch(1), "old failure", 20), 20)
    assert coord.status.state is JobState.RUNNING


def test_a_pre_v3_finished_registration_is_finished_and_an_unknown_outcome_is_not_running() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    coord.apply(registration(finished=True), 0)
    assert coord.status.state is JobState.FINISHED
    coord.apply(replace(registration(epoch=1, finished=True), outcome="PAUSED", reason="newer writer"), 1)
    assert (coord.state, coord.status.reason) == ("FAILED", "newer writer")
