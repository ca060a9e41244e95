"""A job is only as alive as its supervisor's heartbeats: silence (counted while the coordinator
receives its topics) makes a job the records show alive FAILED with the reason, aborts its
pending checkpoints without counting them, and heartbeats that resume make it what the records
say again. Pure: records, heartbeats and the clock in, state out."""

from __future__ import annotations

from dataclasses import replace

from checkpoint_support import JOB, registration

from tidemark.checkpoint import (
    AbortReason,
    AttemptOutcome,
    CheckpointCoordinator,
    CheckpointingOptions,
    EmitAborted,
    JobState,
)
from tidemark.checkpoint.liveness import DeliveryWatch, SupervisorLiveness
from tidemark.protocol.messages import SupervisorHeartbeat
from tidemark.types import Epoch, JobId

OPTS = CheckpointingOptions(interval_ms=1_000, timeout_ms=600_000, tolerable_failures=0)
SILENCE = 5_000


def beat(at: int, job: JobId = JOB) -> SupervisorHeartbeat:
    return SupervisorHeartbeat(job, Epoch(1), "host:42", at)


def running(at: int = 0) -> CheckpointCoordinator:
    coord = CheckpointCoordinator(JOB, OPTS, silence_ms=SILENCE)
    coord.apply(registration(epoch=1), at)
    return coord


def ended(outcome: AttemptOutcome, reason: str, at: int = 10) -> CheckpointCoordinator:
    """A job whose attempt 1 registered, then registered as ended with ``outcome``."""
    coord = running()
    coord.apply(replace(registration(epoch=1), finished=True, outcome=outcome.value, reason=reason), at)
    return coord


def test_delivery_watch_counts_only_unbroken_listening() -> None:
    watch = DeliveryWatch(gap_ms=3_000)
    assert watch.listening_since(0) is None
    for at in range(1_000, 6_000, 1_000):
        watch.confirmed(at)
    assert watch.listening_since(5_500) == 1_000
    assert watch.listening_since(8_001) is None  # no confirmation for 3 s: an outage
    watch.confirmed(20_000)
    assert watch.listening_since(20_000) == 20_000  # listening starts again after the outage


def test_silence_is_counted_from_the_later_of_listening_and_the_last_heartbeat() -> None:
    liveness = SupervisorLiveness(SILENCE)
    assert liveness.silence(100_000, None) is None  # not listening: nothing is known
    assert liveness.silence(5_000, 0) is None
    silent = liveness.silence(5_001, 0)
    assert silent is not None and silent.reason == "supervisor silent for 5 s (no heartbeat since the coordinator " \
                                                   "started listening)"
    liveness.heard(beat(1_763_700_000_000), 10_000)
    assert liveness.silence(15_000, 0) is None
    silent = liveness.silence(17_500, 0)
    assert silent is not None and silent.silent_ms == 7_500
    assert silent.reason == "supervisor silent for 7 s (last heartbeat at 2025-11-21 04:40:00.000Z)"
    assert liveness.silence(17_500, 16_000) is None  # listening again only since 16 s


def test_a_silent_supervisor_makes_a_running_job_failed_with_the_reason_within_seconds() -> None:
    coord = running()
    coord.heard(beat(500), 500)
    coord.tick(1_000, listening_since=0)
    assert coord.pending_checkpoint_ids == (1,)
    assert coord.status.state is JobState.RUNNING
    coord.tick(5_400, listening_since=0)
    assert coord.status.state is JobState.RUNNING  # 4.9 s: not yet
    commands = coord.tick(5_600, listening_since=0)
    assert coord.status.state is JobState.FAILED
    assert coord.status.reason is not None and coord.status.reason.startswith("supervisor silent for 5 s")
    (aborted,) = [c.aborted for c in commands if isinstance(c, EmitAborted)]
    assert aborted.checkpoint_id == 1 and AbortReason.parse(aborted.reason) is AbortReason.SUPERVISOR_SILENT
    assert coord.pending_checkpoint_ids == () and coord.consecutive_failures == 0  # not counted
    assert coord.tick(9_000, listening_since=0) == []  # nothing triggered while silent
    assert not coord.attempt_failed


def test_heartbeats_that_resume_make_the_job_running_again() -> None:
    coord = running()
    coord.tick(6_000, listening_since=0)
    assert coord.status.state is JobState.FAILED
    coord.heard(beat(6_500), 6_500)
    coord.tick(6_600, listening_since=0)
    assert (coord.status.state, coord.status.reason) == (JobState.RUNNING, None)
    assert coord.silence is None


def test_no_silence_while_the_coordinator_is_not_listening() -> None:
    coord = running()
    coord.tick(60_000, listening_since=None)  # a broker outage, or the edge does not watch
    assert coord.status.state is JobState.RUNNING
    coord.tick(62_000, listening_since=58_000)  # listening again for 4 s only
    assert coord.status.state is JobState.RUNNING
    coord.tick(63_001, listening_since=58_000)
    assert coord.status.state is JobState.FAILED


def test_ended_jobs_and_jobs_no_supervisor_announced_are_not_judged() -> None:
    cancelled = ended(AttemptOutcome.CANCELLED, "cancelled")
    cancelled.tick(60_000, listening_since=0)
    assert (cancelled.status.state, cancelled.status.reason) == (JobState.CANCELLED, "cancelled")
    unknown = CheckpointCoordinator(JOB, OPTS, silence_ms=SILENCE)  # only a savepoint request named it
    unknown.tick(60_000, listening_since=0)
    assert unknown.status.state is JobState.CREATED and unknown.silence is None


def test_a_supervisor_heard_before_it_registered_is_judged_too() -> None:
    coord = CheckpointCoordinator(JOB, OPTS, silence_ms=SILENCE)
    coord.heard(beat(100), 100)
    coord.tick(1_000, listening_since=0)
    assert coord.status.state is JobState.CREATED
    coord.tick(5_200, listening_since=0)
    assert coord.status.state is JobState.FAILED


def test_a_restarting_job_whose_supervisor_is_gone_is_failed() -> None:
    coord = ended(AttemptOutcome.RESTARTING, "stage a exited")
    coord.heard(beat(20), 20)
    coord.tick(3_000, listening_since=0)
    assert (coord.status.state, coord.status.reason) == (JobState.RESTARTING, "stage a exited")
    coord.tick(5_100, listening_since=0)
    assert coord.status.state is JobState.FAILED


def test_another_jobs_heartbeat_is_not_this_jobs() -> None:
    coord = running()
    coord.heard(beat(4_000, JobId("other")), 4_000)
    coord.tick(5_001, listening_since=0)
    assert coord.status.state is JobState.FAILED


def test_without_listening_evidence_the_state_is_what_the_records_say() -> None:
    coord = running()
    coord.tick(1_000_000)  # no listening_since: the coordinator's callers before liveness
    assert coord.status.state is JobState.RUNNING and coord.silence is None
