"""Triggering, two-step completion, timeouts, pauses, failures, savepoints, epochs, restore."""

from __future__ import annotations

from dataclasses import replace

import pytest
from checkpoint_support import (
    JOB,
    MAX_P,
    ack,
    ack_all,
    decline,
    registration,
    savepoint_request,
    triggers,
)

from tidemark.checkpoint import (
    AbortReason,
    CheckpointCoordinator,
    CheckpointingOptions,
    EmitAborted,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    FailJob,
    NewerCheckpointCompleted,
    PersistCheckpoint,
    RestoreRequest,
)
from tidemark.checkpoint.outcomes import DECLINED_SUBSUMED
from tidemark.checkpoint_store import REJECTED_PREFIX
from tidemark.protocol.messages import CheckpointDiscarded
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch

OPTS = CheckpointingOptions(interval_ms=100, timeout_ms=1_000)


def started(options: CheckpointingOptions = OPTS, parallelism: int = 2):
    coord = CheckpointCoordinator(JOB, options)
    reg = registration(parallelism=parallelism)
    assert coord.apply(reg, 0) == []
    return coord, reg


def aborts(commands) -> list[EmitAborted]:
    return [c for c in commands if isinstance(c, EmitAborted)]


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=5)
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=100, timeout_ms=0)
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=100, min_pause_ms=-1)
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=100, max_concurrent=0)
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=100, tolerable_failures=-1)
    with pytest.raises(ValueError):
        CheckpointingOptions(interval_ms=100, mode="EXACTLY_ONCE")  # type: ignore[arg-type]
    assert CheckpointingOptions(interval_ms=100, min_pause_ms=10, max_concurrent=3).effective_max_concurrent == 1


def test_nothing_is_triggered_before_a_job_registers() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    assert coord.tick(10_000) == []


def test_periodic_trigger_goes_to_the_sources_with_the_configured_mode() -> None:
    """A new attempt's first checkpoint is triggered at its registration (its sources take it after
    their first records, runtime.worker.runner), the next ones an interval apart."""
    options = CheckpointingOptions(interval_ms=100, mode=CheckpointingMode.AT_LEAST_ONCE)
    coord, reg = started(options)
    (command,) = coord.tick(0)
    assert isinstance(command, EmitTrigger)
    assert command.trigger.checkpoint_id == 1
    assert command.trigger.checkpoint_type is CheckpointType.CHECKPOINT
    assert command.trigger.mode is CheckpointingMode.AT_LEAST_ONCE
    assert command.trigger.triggered_at == 0
    assert command.source_tasks == reg.source_tasks
    assert coord.pending_checkpoint_ids == (1,)
    (persist,) = ack_all(coord, reg, 1, 20)
    coord.apply(persist.metadata, 20)
    assert coord.tick(99) == []
    assert triggers(coord.tick(100))[0].checkpoint_id == 2


def test_max_concurrent_blocks_the_next_trigger_until_one_finishes() -> None:
    coord, reg = started()
    coord.tick(100)
    assert coord.tick(200) == []  # one in flight, max_concurrent 1
    commands = ack_all(coord, reg, 1, 210)
    assert [type(c) for c in commands] == [PersistCheckpoint]
    assert coord.tick(220) == []  # still completing (not yet durable)
    coord.apply(commands[0].metadata, 230)
    assert triggers(coord.tick(240))[0].checkpoint_id == 2


def test_two_concurrent_checkpoints_when_allowed() -> None:
    coord, _ = started(CheckpointingOptions(interval_ms=100, max_concurrent=2))
    assert len(triggers(coord.tick(100))) == 1
    assert len(triggers(coord.tick(200))) == 1
    assert coord.tick(300) == []
    assert coord.pending_checkpoint_ids == (1, 2)


def test_completion_is_two_step_persist_then_completed_after_the_store_confirms() -> None:
    coord, reg = started()
    coord.tick(100)
    for task in reg.tasks[:-1]:
        assert coord.apply(ack(1, task, 150), 150) == []
    (persist,) = coord.apply(ack(1, reg.tasks[-1], 160), 170)
    assert isinstance(persist, PersistCheckpoint)
    assert persist.metadata_path == "job/chk-1/_metadata"
    meta = persist.metadata
    assert [t.task_id for t in meta.tasks] == sorted(t.task_id for t in reg.tasks)
    assert (meta.state_size_bytes, meta.checkpointed_size_bytes) == (400, 40)
    assert (meta.triggered_at, meta.completed_at, meta.max_parallelism) == (100, 160, MAX_P)
    assert coord.completing_checkpoint_ids == (1,) and coord.last_completed is None
    (completed,) = coord.apply(meta, 180)
    assert isinstance(completed, EmitCompleted)
    assert completed.completed.checkpoint_id == 1
    assert completed.completed.completed_at == 180
    assert completed.completed.metadata_path == "job/chk-1/_metadata"
    assert coord.last_completed is not None and coord.last_completed.durable
    assert coord.completing_checkpoint_ids == () and coord.pending_checkpoint_ids == ()


def test_store_rejection_aborts_the_completing_checkpoint_and_counts_as_failure() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, tolerable_failures=1))
    coord.tick(100)
    ack_all(coord, reg, 1, 110)
    rejection = CheckpointDiscarded(JOB, CheckpointId(1), 120, f"{REJECTED_PREFIX}missing files")
    (aborted,) = coord.apply(rejection, 120)
    assert isinstance(aborted, EmitAborted)
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.STORE_REJECTED
    assert coord.consecutive_failures == 1 and coord.completing_checkpoint_ids == ()


def test_timeout_aborts_and_counts() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, timeout_ms=50, tolerable_failures=3))
    coord.tick(100)
    coord.apply(ack(1, reg.tasks[0], 120), 120)
    assert coord.tick(149) == []
    commands = coord.tick(150)
    (aborted,) = aborts(commands)
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.TIMEOUT
    assert aborted.aborted.aborted_at == 150
    assert coord.consecutive_failures == 1
    assert coord.pending_checkpoint_ids == ()


def test_decline_aborts_and_failures_beyond_tolerance_fail_the_attempt_over_once() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, tolerable_failures=1))
    coord.tick(100)
    (aborted,) = coord.apply(decline(1, reg.tasks[2], 110), 110)
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.DECLINED
    assert "disk full" in aborted.aborted.reason
    coord.tick(200)
    commands = coord.apply(decline(2, reg.tasks[0], 210), 210)
    assert [type(c) for c in commands] == [EmitAborted, FailJob]
    failed = commands[1].failed
    assert (failed.job_id, failed.epoch, failed.failed_at) == (JOB, reg.epoch, 210)
    assert "2 consecutive checkpoint failures exceed the tolerable 1" in failed.reason
    assert coord.consecutive_failures == 2
    assert coord.attempt_failed and coord.state == "RESTARTING"
    assert "2 consecutive checkpoint failures" in (coord.status.reason or "")
    assert coord.tick(300) == [] and coord.tick(400) == []  # waiting for the failover: no triggers
    assert coord.apply(decline(2, reg.tasks[1], 410), 410) == []
    assert coord.apply(failed, 420) == []  # its own record read back changes nothing


def test_a_failover_aborts_the_failed_attempts_other_checkpoints() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, max_concurrent=2, tolerable_failures=0))
    coord.tick(100)
    coord.tick(200)
    commands = coord.apply(decline(1, reg.tasks[0], 210), 210)
    assert [type(c) for c in commands] == [EmitAborted, FailJob, EmitAborted]
    superseded = commands[2].aborted
    assert superseded.checkpoint_id == 2
    assert AbortReason.parse(superseded.reason) is AbortReason.SUPERSEDED
    assert coord.consecutive_failures == 1  # superseded does not count
    assert coord.pending_checkpoint_ids == ()


def test_a_new_attempt_clears_the_failures_and_checkpoints_again() -> None:
    """The failure policy never stalls a job: the failed-over attempt (or the same command line
    started again) registers a new epoch, which starts with the full tolerance."""
    coord, reg = started(CheckpointingOptions(interval_ms=100, timeout_ms=50, tolerable_failures=0))
    coord.tick(100)
    commands = coord.tick(150)  # timeout
    assert [type(c) for c in commands] == [EmitAborted, FailJob]
    assert coord.tick(1_000) == []
    coord.apply(registration(epoch=reg.epoch + 1, at=1_100), 1_100)
    assert coord.consecutive_failures == 0 and not coord.attempt_failed and coord.state == "RUNNING"
    (trigger,) = triggers(coord.tick(1_200))
    assert trigger.epoch == reg.epoch + 1


def test_a_replayed_failure_is_not_failed_again() -> None:
    options = CheckpointingOptions(interval_ms=100, timeout_ms=50, tolerable_failures=0)
    coord, reg = started(options)
    records: list[object] = [reg]
    for command in [*coord.tick(100), *coord.tick(150)]:
        records.append(command.failed if isinstance(command, FailJob) else
                       command.trigger if isinstance(command, EmitTrigger) else command.aborted)
    rebuilt = CheckpointCoordinator(JOB, options)
    assert rebuilt.replay(records, 200) == []
    assert rebuilt.attempt_failed and rebuilt.state == "RESTARTING"


def test_a_decline_because_a_newer_barrier_overtook_the_alignment_is_not_a_failure() -> None:
    """A stop-with-savepoint triggered right after a checkpoint overtakes its alignment at a
    channel stage; that decline must not fail the job over (Flink: CHECKPOINT_DECLINED_SUBSUMED)."""
    coord, reg = started(CheckpointingOptions(interval_ms=100, tolerable_failures=0))
    coord.tick(100)
    coord.apply(savepoint_request("stop", 110, stop=True), 110)
    overtaken = replace(decline(1, reg.tasks[2], 120),
                        reason=f"{DECLINED_SUBSUMED}: alignment overtaken by a newer barrier")
    (aborted,) = coord.apply(overtaken, 120)
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.SUBSUMED
    assert coord.consecutive_failures == 0 and not coord.attempt_failed and coord.is_stopping


def test_a_completed_checkpoint_resets_the_failure_count() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, tolerable_failures=1))
    coord.tick(100)
    coord.apply(decline(1, reg.tasks[0], 110), 110)
    coord.tick(200)
    (persist,) = ack_all(coord, reg, 2, 210)
    coord.apply(persist.metadata, 220)
    assert coord.consecutive_failures == 0


def test_min_pause_counts_from_the_last_completion() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, min_pause_ms=250, max_concurrent=4))
    coord.tick(100)
    assert coord.tick(200) == []  # a pause serialises checkpoints
    (persist,) = ack_all(coord, reg, 1, 290)
    coord.apply(persist.metadata, 300)
    assert coord.tick(549) == []
    assert triggers(coord.tick(550))[0].checkpoint_id == 2


def test_newer_completed_checkpoint_subsumes_older_pending_ones() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, max_concurrent=2, tolerable_failures=0))
    coord.tick(100)
    coord.tick(200)
    (persist,) = ack_all(coord, reg, 2, 210)
    commands = coord.apply(persist.metadata, 220)
    assert isinstance(commands[0], EmitCompleted)
    (aborted,) = aborts(commands)
    assert aborted.aborted.checkpoint_id == 1
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.SUBSUMED
    assert coord.consecutive_failures == 0


def test_savepoint_is_triggered_at_once_and_shares_the_id_sequence() -> None:
    coord, reg = started()
    coord.tick(100)
    (command,) = coord.apply(savepoint_request("r1", 120), 120)
    assert command.trigger.checkpoint_id == 2
    assert command.trigger.checkpoint_type is CheckpointType.SAVEPOINT
    assert coord.savepoint_id("r1") == 2
    assert coord.apply(savepoint_request("r1", 130), 130) == []  # same request again
    (persist,) = ack_all(coord, reg, 2, 150)
    assert persist.metadata_path == "job/savepoints/sp-2/_metadata"
    (completed,) = coord.apply(persist.metadata, 160)
    assert completed.completed.checkpoint_type is CheckpointType.SAVEPOINT
    assert coord.pending_checkpoint_ids == (1,)  # a savepoint does not subsume checkpoints


def test_savepoint_failures_never_count() -> None:
    coord, reg = started(CheckpointingOptions(interval_ms=100, tolerable_failures=0, timeout_ms=50))
    coord.tick(0)  # the attempt's first checkpoint, at its registration, completes
    (persist,) = ack_all(coord, reg, 1, 5)
    coord.apply(persist.metadata, 5)
    coord.apply(savepoint_request("r1", 10), 10)
    commands = coord.apply(decline(2, reg.tasks[0], 20), 20)
    assert [type(c) for c in commands] == [EmitAborted]
    coord.apply(savepoint_request("r2", 30), 30)
    assert [type(c) for c in coord.tick(80)] == [EmitAborted]
    assert coord.consecutive_failures == 0


def test_stop_with_savepoint_suspends_then_finishes_the_job() -> None:
    coord, reg = started()
    (command,) = coord.apply(savepoint_request("stop", 50, stop=True), 50)
    assert command.trigger.checkpoint_type is CheckpointType.STOP_WITH_SAVEPOINT
    assert coord.is_stopping
    assert coord.tick(100) == [] and coord.tick(200) == []  # no periodic checkpoint meanwhile
    (persist,) = ack_all(coord, reg, 1, 210)
    coord.apply(persist.metadata, 220)
    assert coord.is_finishing and not coord.is_stopping
    assert coord.tick(400) == []
    assert coord.apply(registration(at=500, finished=True), 500) == []
    assert coord.tick(1_000) == []


def test_failed_stop_with_savepoint_resumes_periodic_checkpoints() -> None:
    coord, reg = started()
    coord.apply(savepoint_request("stop", 50, stop=True), 50)
    coord.apply(decline(1, reg.tasks[0], 60), 60)
    assert not coord.is_stopping and not coord.is_finishing
    assert triggers(coord.tick(100))[0].checkpoint_type is CheckpointType.CHECKPOINT


def test_a_newer_epoch_supersedes_pending_checkpoints() -> None:
    coord, reg = started()
    coord.tick(100)
    (aborted,) = coord.apply(registration(epoch=1, at=150), 150)
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.SUPERSEDED
    assert coord.consecutive_failures == 0
    assert coord.apply(registration(epoch=0, at=160), 160) == []  # stale attempt ignored
    trigger = triggers(coord.tick(160))[0]  # the new attempt's first checkpoint: at its registration
    assert (trigger.checkpoint_id, trigger.epoch) == (2, 1)


def test_restore_issues_a_command_with_key_group_assignments_and_waits_for_the_new_epoch() -> None:
    coord, reg = started()
    coord.tick(100)
    (persist,) = ack_all(coord, reg, 1, 110)
    coord.apply(persist.metadata, 120)
    coord.tick(200)
    request = RestoreRequest("r-1", persist.metadata, persist.metadata_path, 3, requested_at=300)
    commands = coord.request_restore(request, 300)
    assert isinstance(commands[0], EmitRestore)
    restore = commands[0].restore
    assert (restore.epoch, restore.parallelism, restore.checkpoint_id) == (1, 3, 1)
    assert not restore.is_savepoint and restore.metadata_path == "job/chk-1/_metadata"
    agg = [(a.key_group_start, a.key_group_end) for a in restore.assignments if a.operator_id == "agg"]
    assert agg == [(0, 42), (43, 85), (86, 127)]
    (aborted,) = aborts(commands)
    assert aborted.aborted.checkpoint_id == 2
    assert coord.active_epoch == Epoch(1)
    assert coord.state == "RESTARTING" and coord.status.reason == "restoring checkpoint 1 as attempt 1"
    assert coord.tick(1_000) == []  # no trigger until epoch 1 registers
    coord.apply(registration(epoch=1, parallelism=3, at=1_000), 1_000)
    assert coord.state == "RUNNING"
    trigger = triggers(coord.tick(1_100))[0]
    assert (trigger.checkpoint_id, trigger.epoch) == (3, 1)
    assert coord.stats().last_restore_at == 300


def _completing_after_checkpoint_1(coord, reg):
    """Checkpoint 1 completed; checkpoint 2 fully acknowledged, its persist not yet confirmed."""
    coord.tick(100)
    (first,) = ack_all(coord, reg, 1, 110)
    coord.apply(first.metadata, 120)
    coord.tick(200)
    (second,) = ack_all(coord, reg, 2, 210)
    return first, second


def test_a_guarded_restore_is_refused_when_a_newer_checkpoint_completed() -> None:
    """A failover chose checkpoint 1 while 2 completed: the running attempt's sinks may have
    committed 2's output, so restoring 1 would commit it twice. Refused, and nothing changes."""
    coord, reg = started()
    first, second = _completing_after_checkpoint_1(coord, reg)
    coord.apply(second.metadata, 220)
    request = RestoreRequest("r", first.metadata, first.metadata_path, 2, requested_at=300, newest_seen=1)
    with pytest.raises(NewerCheckpointCompleted, match="checkpoint 2 of job job completed"):
        coord.request_restore(request, 300)
    assert coord.active_epoch == Epoch(0) and coord.state == "RUNNING"
    for newest_seen in (2, None):  # it saw 2, or an operator rolls back on purpose
        request = replace(request, restore_id=f"r{newest_seen}", newest_seen=newest_seen)
        assert isinstance(coord.request_restore(request, 310)[0], EmitRestore)


def test_a_checkpoint_newer_than_the_restored_one_is_never_announced() -> None:
    """Checkpoint 2 was fully acknowledged but not durable when the restore of 1 was issued: the
    old attempt's processes may still be alive, so its completion is never announced (they would
    commit its output, which the attempt restored from 1 writes again); it aborts as superseded,
    and the store's confirmation that follows changes nothing."""
    coord, reg = started()
    first, second = _completing_after_checkpoint_1(coord, reg)
    request = RestoreRequest("r", first.metadata, first.metadata_path, 2, requested_at=300, newest_seen=1)
    (aborted,) = aborts(coord.request_restore(request, 300))
    assert coord.apply(second.metadata, 320) == []  # the store's confirmation comes too late
    assert aborted.aborted.checkpoint_id == 2 and aborted.aborted.epoch == 0
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.SUPERSEDED
    assert "restores checkpoint 1" in aborted.aborted.reason
    assert coord.last_completed.checkpoint_id == 1 and coord.completing_checkpoint_ids == ()
    assert coord.consecutive_failures == 0


def test_the_restored_checkpoint_itself_is_still_announced() -> None:
    """Restoring checkpoint 2 while the store confirms it: announcing it is harmless (the
    restore commits its output anyway, once, by the commit markers)."""
    coord, reg = started()
    _, second = _completing_after_checkpoint_1(coord, reg)
    request = RestoreRequest("r", second.metadata, second.metadata_path, 2, requested_at=300, newest_seen=2)
    coord.request_restore(request, 300)
    (completed,) = coord.apply(second.metadata, 320)
    assert isinstance(completed, EmitCompleted) and completed.completed.checkpoint_id == 2


@pytest.mark.parametrize("ending", ["RESTARTING", "CANCELLED"])
def test_a_checkpoint_of_an_ended_attempt_is_never_announced(ending: str) -> None:
    """The supervisor reported the attempt ended (a failover: it chooses the restore source
    next, from what is durable) before checkpoint 2 was announced: 2 aborts."""
    coord, reg = started()
    _, second = _completing_after_checkpoint_1(coord, reg)
    (aborted,) = aborts(coord.apply(replace(reg, finished=True, outcome=ending, registered_at=300), 300))
    assert coord.apply(second.metadata, 320) == []
    assert aborted.aborted.checkpoint_id == 2
    assert AbortReason.parse(aborted.aborted.reason) is AbortReason.SUPERSEDED
    assert "job attempt 0 ended" in aborted.aborted.reason


def test_an_empty_start_of_a_newer_attempt_supersedes_the_completing_checkpoint() -> None:
    coord, reg = started()
    _, second = _completing_after_checkpoint_1(coord, reg)
    (aborted,) = aborts(coord.apply(registration(epoch=1, at=300), 300))
    assert coord.apply(second.metadata, 320) == []
    assert aborted.aborted.checkpoint_id == 2 and coord.last_completed.checkpoint_id == 1


def test_a_registration_without_tasks_is_never_checkpointed() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    assert coord.state == "CREATED"
    coord.apply(replace(registration(), tasks=()), 0)
    assert coord.state == "CREATED"
    assert coord.tick(1_000) == []
    assert coord.apply(savepoint_request("r", 1_000), 1_000) == []


def test_restore_from_a_stop_savepoint_at_a_new_parallelism_resumes_checkpointing() -> None:
    coord, reg = started()
    coord.tick(100)
    (persist,) = ack_all(coord, reg, 1, 110)
    coord.apply(persist.metadata, 120)
    coord.apply(savepoint_request("stop", 150, stop=True), 150)
    (sp,) = ack_all(coord, reg, 2, 160)
    coord.apply(sp.metadata, 170)
    coord.apply(registration(at=180, finished=True), 180)
    assert coord.is_finishing and coord.tick(1_000) == []
    assert coord.state == "SUSPENDED"
    request = RestoreRequest("r", sp.metadata, sp.metadata_path, parallelism=4, requested_at=2_000)
    (restore,) = coord.request_restore(request, 2_000)
    assert restore.restore.is_savepoint and restore.restore.metadata_path == "job/savepoints/sp-2/_metadata"
    assert len(restore.restore.assignments) == 8
    coord.apply(registration(epoch=1, parallelism=4, at=2_010), 2_010)
    assert not coord.is_finishing
    trigger = triggers(coord.tick(2_110))[0]
    assert (trigger.checkpoint_id, trigger.epoch) == (3, 1)
    new_reg = registration(epoch=1, parallelism=4)
    (persist,) = ack_all(coord, new_reg, 3, 2_120)
    assert len(persist.metadata.tasks) == 8


def test_a_savepoint_requested_before_registration_waits_for_it() -> None:
    coord = CheckpointCoordinator(JOB, OPTS)
    assert coord.apply(savepoint_request("early", 5), 5) == []
    (command,) = coord.apply(registration(at=10), 10)
    assert command.trigger.checkpoint_type is CheckpointType.SAVEPOINT
    assert coord.savepoint_id("early") == 1


def test_unconfirmed_persists_can_be_sent_again_until_the_store_confirms() -> None:
    coord, reg = started()
    coord.tick(100)
    (persist,) = ack_all(coord, reg, 1, 110)
    assert coord.unconfirmed_persists() == [persist]
    coord.apply(persist.metadata, 120)
    assert coord.unconfirmed_persists() == []
    with pytest.raises(TypeError):
        coord.apply(object(), 130)  # type: ignore[arg-type]


def test_concurrent_savepoint_requests_are_triggered_one_at_a_time_in_order() -> None:
    """Flink-style queue: a request made while another savepoint is in flight waits, then is
    triggered as soon as that one completes or fails; every request gets its own savepoint."""
    coord, reg = started()
    (first,) = coord.apply(savepoint_request("a", 10), 10)
    assert coord.apply(savepoint_request("b", 11), 11) == []
    assert coord.apply(savepoint_request("c", 12), 12) == []
    assert coord.tick(100) == []  # a savepoint in flight counts against max_concurrent (1)
    assert (coord.savepoint_id("a"), coord.savepoint_id("b")) == (first.trigger.checkpoint_id, None)
    (persist,) = ack_all(coord, reg, 1, 20)
    completed, second = coord.apply(persist.metadata, 30)
    assert isinstance(completed, EmitCompleted) and second.trigger.checkpoint_id == 2
    assert coord.savepoint_id("b") == 2
    (aborted, third) = coord.apply(decline(2, reg.tasks[0], 40), 40)  # b fails: c goes next
    assert isinstance(aborted, EmitAborted) and third.trigger.checkpoint_type is CheckpointType.SAVEPOINT
    assert coord.savepoint_id("c") == 3
    assert all(coord.savepoint_failure(r) is None for r in "abc")


def test_requests_queued_behind_a_stop_with_savepoint_fail_when_the_job_stops() -> None:
    coord, reg = started()
    (stop,) = coord.apply(savepoint_request("stop", 10, stop=True), 10)
    assert coord.apply(savepoint_request("late-1", 11), 11) == []
    assert coord.apply(savepoint_request("late-2", 12), 12) == []
    (persist,) = ack_all(coord, reg, 1, 20)
    coord.apply(persist.metadata, 30)
    assert coord.is_finishing and coord.savepoint_id("late-1") is None
    for request in ("late-1", "late-2"):
        assert coord.savepoint_failure(request) == "the job stopped with savepoint 1 before this request was triggered"
    assert coord.apply(savepoint_request("after", 40), 40) == []  # the job is over: fails at once
    assert coord.savepoint_failure("after") == "the job stopped with a savepoint; a savepoint needs a running job attempt"
    coord.apply(registration(at=50, finished=True), 50)
    assert coord.tick(1_000) == [] and coord.savepoint_failure("stop") is None


def test_a_request_queued_behind_a_failed_stop_is_served() -> None:
    coord, reg = started()
    coord.apply(savepoint_request("stop", 10, stop=True), 10)
    coord.apply(savepoint_request("next", 11), 11)
    _, trigger = coord.apply(decline(1, reg.tasks[0], 20), 20)
    assert trigger.trigger.checkpoint_id == 2 and coord.savepoint_id("next") == 2


def test_an_ended_attempt_fails_its_queued_requests_and_replay_agrees() -> None:
    """The supervisor registers how an attempt ended (cancelled, failed, restarting): queued
    requests fail with that reason; after a restore, new requests queue for the next attempt."""
    coord = CheckpointCoordinator(JOB, OPTS)
    cancelled = replace(registration(at=10, finished=True), tasks=(), outcome="CANCELLED",
                        reason="cancelled: the supervisor got SIGTERM")
    records = [savepoint_request("early", 5), cancelled]
    for record in records:
        coord.apply(record, 10)
    reason = coord.savepoint_failure("early")
    assert reason == ("job attempt 0 ended (CANCELLED: cancelled: the supervisor got SIGTERM) "
                      "before this request was triggered")
    rebuilt = CheckpointCoordinator(JOB, OPTS)
    assert rebuilt.replay(records, 100) == [] and rebuilt.savepoint_failure("early") == reason
    coord.apply(registration(epoch=1, at=20), 20)
    (trigger,) = coord.apply(savepoint_request("later", 30), 30)
    assert coord.savepoint_id("later") == trigger.trigger.checkpoint_id and coord.savepoint_failure("later") is None
