"""A job's state as the coordinator sees it, and why: derived from the folded records only.

States (``GET /jobs``, ``tidemark jobs list``; docs/operations.md "Job states"):

- ``CREATED``: the job is known (its supervisor announced an attempt, or a savepoint request
  named it) but no attempt runs with tasks yet;
- ``RUNNING``: the newest attempt registered with its tasks and is being checkpointed (a
  stop-with-savepoint in flight is still ``RUNNING``, with ``stopping`` set);
- ``RESTARTING``: the newest attempt failed (the coordinator's failure policy, or its supervisor
  saw a stage fail) or a restore was issued, and the next attempt has not registered yet;
- ``SUSPENDED``: a stop-with-savepoint completed (the Flink operator's suspended job): its state
  is in that savepoint (``last_savepoint``), and a start resumes it; one stopped for a deployment
  generation (``SavepointRequest.generation``, the chart's pre-upgrade hook) is resumed only by a
  start of that generation or a newer one (:mod:`tidemark.runtime.supervisor.suspension`);
- ``FINISHED``: the supervisor registered the attempt as finished without a stop-with-savepoint;
- ``CANCELLED``: the supervisor was stopped (``tidemark jobs cancel``, SIGTERM/SIGINT); its
  pending checkpoints were aborted as ``JOB_FINISHED``, so nothing of it counts as a failure;
- ``FAILED``: the supervisor gave up: a start error a restart will not fix, or more failures than
  ``--max-restarts``; or its supervisor fell silent (no ``SupervisorHeartbeat`` for the silence
  limit while the coordinator listens, :mod:`tidemark.checkpoint.liveness`): its processes are
  gone, whatever the records last said. Heartbeats that resume make it what the records say again.

Each comes from records on the coordinator's topics (``JobRegistration`` v3's ``outcome`` and
``reason``, ``AttemptFailed``, ``RestoreCommand``, ``CheckpointCompleted``), so a restarted
coordinator rebuilds the same state from them; only the silence is this coordinator's own
observation (heartbeats are not replayed).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tidemark.protocol.messages import JobRegistration


class JobState(str, enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    FINISHED = "FINISHED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"


class AttemptOutcome(str, enum.Enum):
    """How an attempt ended: ``JobRegistration.outcome`` of a registration with ``finished``."""

    FINISHED = "FINISHED"
    CANCELLED = "CANCELLED"
    RESTARTING = "RESTARTING"
    FAILED = "FAILED"

    @classmethod
    def of(cls, registration: JobRegistration) -> AttemptOutcome | None:
        """The outcome a registration carries (a finished one without: ``FINISHED``)."""
        if not registration.finished:
            return None
        try:
            return cls(registration.outcome) if registration.outcome else cls.FINISHED
        except ValueError:
            return cls.FAILED  # written by a newer writer: not running, reason says why


_ENDED_STATES = {
    AttemptOutcome.FINISHED: JobState.FINISHED,
    AttemptOutcome.CANCELLED: JobState.CANCELLED,
    AttemptOutcome.RESTARTING: JobState.RESTARTING,
    AttemptOutcome.FAILED: JobState.FAILED,
}


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job's state and the one-line reason for it (``None`` when there is nothing to say)."""

    state: JobState
    reason: str | None = None


def job_status(
    registration: JobRegistration | None,
    *,
    restore_epoch: int,
    restore_reason: str | None,
    failed_epoch: int,
    failed_reason: str | None,
    savepoint_finished: bool,
    stop_generation: int | None = None,
    silence: str | None = None,
) -> JobStatus:
    """The state of a job from the facts of its ledger (see the module docstring).

    ``restore_epoch``: the newest restore command's epoch (-1: none); ``failed_epoch``: the
    newest attempt the coordinator failed over (-1: none); ``savepoint_finished``: a
    stop-with-savepoint of the registered attempt completed (``stop_generation``: the deployment
    generation it was asked for, if any); ``silence``: why the job's supervisor
    is taken for gone, if it is (a job the records show alive is then ``FAILED`` with it)."""
    status = _recorded_status(registration, restore_epoch, restore_reason, failed_epoch, failed_reason,
                              savepoint_finished, stop_generation)
    if silence is not None and status.state in _ALIVE_STATES:
        return JobStatus(JobState.FAILED, silence)
    return status


_ALIVE_STATES = frozenset({JobState.CREATED, JobState.RUNNING, JobState.RESTARTING})


def meant_to_run(state: JobState) -> bool:
    """Whether a job in ``state`` is meant to run: ``CREATED``, ``RUNNING`` or ``RESTARTING``.
    Every other state is a job that ended (``SUSPENDED``, ``FINISHED``, ``CANCELLED``, ``FAILED``,
    and any ended state added later), which nothing runs until it is started again."""
    return state in _ALIVE_STATES


def _recorded_status(registration: JobRegistration | None, restore_epoch: int, restore_reason: str | None,
                     failed_epoch: int, failed_reason: str | None, savepoint_finished: bool,
                     stop_generation: int | None) -> JobStatus:
    if registration is None or restore_epoch > registration.epoch:
        if restore_epoch >= 0:
            return JobStatus(JobState.RESTARTING, restore_reason)
        return JobStatus(JobState.CREATED)
    outcome = AttemptOutcome.of(registration)
    if savepoint_finished and outcome in (None, AttemptOutcome.FINISHED):
        if stop_generation is None:
            return JobStatus(JobState.SUSPENDED, "stopped with a savepoint; a start resumes it")
        return JobStatus(JobState.SUSPENDED, f"stopped with a savepoint for generation {stop_generation}; a start of "
                                             f"generation {stop_generation} or newer resumes it")
    if outcome is not None:
        return JobStatus(_ENDED_STATES[outcome], registration.reason or None)
    if registration.epoch <= failed_epoch:
        return JobStatus(JobState.RESTARTING, failed_reason)
    if not registration.tasks:
        return JobStatus(JobState.CREATED, "attempt announced; its stages are starting")
    return JobStatus(JobState.RUNNING)
