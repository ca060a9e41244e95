"""The checkpoint coordinator: records and the clock in, commands out.

Flink counterpart: CheckpointCoordinator.

Pure: no threads, no I/O, no wall clock; ``now_ms`` is always passed in.

Lifecycle:

1. construct with the job id and its :class:`CheckpointingOptions`;
2. after a (re)start, ``replay(records, now_ms)`` once with every record of the coordinator's
   topics (see :mod:`tidemark.checkpoint.coordinator_ledger`); it rebuilds pending checkpoints without
   repeating commands already carried out, and returns only the commands whose effect is not in
   the records yet (a persist or notification the previous instance did not get to write);
3. then ``apply(record, now_ms)`` for every new record, ``heard(heartbeat, now_ms)`` for every
   live supervisor heartbeat, ``tick(now_ms, listening_since=...)`` periodically (timeouts,
   periodic triggers, minimum pause, the supervisor's silence: :mod:`tidemark.checkpoint.liveness`)
   and ``request_restore`` when a restore is asked for.

Every call returns the commands to carry out, in order. A decision is folded into the ledger as
the record it will write, so when the service later consumes its own record the fold is a no-op,
and a coordinator rebuilt from the records continues with exactly the same decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.checkpoint.effects import (
    Command,
    EmitAborted,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    FailJob,
    PersistCheckpoint,
)
from tidemark.checkpoint.completed import CompletedCheckpoint
from tidemark.checkpoint.job_state import JobStatus, job_status
from tidemark.checkpoint.liveness import SILENCE_MS, Silence, SupervisorLiveness
from tidemark.checkpoint.coordinator_ledger import CheckpointLedger, CoordinatorRecord
from tidemark.checkpoint.options import CheckpointingOptions
from tidemark.checkpoint.outcomes import DECLINED_SUBSUMED, AbortReason, AckOutcome
from tidemark.checkpoint.pending import PendingCheckpoint
from tidemark.checkpoint.restore_request import NewerCheckpointCompleted, RestoreRequest
from tidemark.checkpoint.restore_planner import plan_restore
from tidemark.checkpoint.stats import CheckpointStatsSnapshot
from tidemark.checkpoint_store.layout import metadata_path
from tidemark.protocol.messages import (
    AttemptFailed,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointTrigger,
    JobRegistration,
    RestoreCommand,
    SupervisorHeartbeat,
    TaskAck,
)
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId


@dataclass(frozen=True, slots=True)
class AckResult:
    """What one ack did and the commands it led to."""

    outcome: AckOutcome
    commands: tuple[Command, ...]


class CheckpointCoordinator:
    """Triggers, tracks, completes and aborts the checkpoints and savepoints of one job."""

    def __init__(
        self, job_id: JobId, options: CheckpointingOptions, *, stats_history: int = 20,
        silence_ms: int = SILENCE_MS,
    ) -> None:
        self.job_id = job_id
        self.options = options
        self._ledger = CheckpointLedger(
            job_id, options.interval_ms, options.tolerable_failures, stats_history
        )
        self._liveness = SupervisorLiveness(silence_ms)
        self._silence: Silence | None = None  # as of the last tick

    # ------------------------------------------------------------------ inputs

    def replay(self, records: Iterable[CoordinatorRecord], now_ms: int) -> list[Command]:
        """Rebuild state from ``records``; return the commands still owed at ``now_ms``."""
        for record in records:
            self._ledger.fold(record)
        return self._decide(now_ms)

    def apply(
        self, record: CoordinatorRecord, now_ms: int, *, replaying: bool = False
    ) -> list[Command]:
        """Fold one record and, unless ``replaying``, return the decisions it leads to."""
        self._ledger.fold(record)
        return [] if replaying else self._decide(now_ms)

    def acknowledge(self, ack: TaskAck, now_ms: int) -> AckResult:
        """Like ``apply`` for an ack, also saying what the ack did."""
        outcome = self._ledger.fold(ack)
        assert outcome is not None
        return AckResult(outcome, tuple(self._decide(now_ms)))

    def heard(self, heartbeat: SupervisorHeartbeat, now_ms: int) -> None:
        """A live heartbeat of the job's supervisor (never a replayed one)."""
        if heartbeat.job_id == self.job_id:
            self._liveness.heard(heartbeat, now_ms)

    def tick(self, now_ms: int, *, listening_since: int | None = None) -> list[Command]:
        """Abort timed-out checkpoints, then trigger a periodic checkpoint if one is due.

        ``listening_since``: since when the edge has been receiving its topics without a gap
        (None: it is not, or it does not watch). A job whose supervisor was silent for longer
        than the silence limit of that time is not running (:attr:`status`): its pending
        checkpoints are aborted as ``SUPERVISOR_SILENT`` (not counted as failures) and none is
        triggered until a heartbeat is heard again."""
        self._silence = self._liveness.silence(now_ms, listening_since) if self._supervisor_expected else None
        commands: list[Command] = []
        deadline = now_ms - self.options.timeout_ms
        for pending in self._pending_in_order():
            cid, epoch = pending.checkpoint_id, pending.epoch
            if self._silence is not None:
                commands.append(self._abort(cid, epoch, AbortReason.SUPERVISOR_SILENT, self._silence.reason, now_ms))
            elif pending.triggered_at <= deadline:
                detail = f"not acknowledged within {self.options.timeout_ms} ms"
                commands.append(self._abort(cid, epoch, AbortReason.TIMEOUT, detail, now_ms))
        commands.extend(self._decide(now_ms))
        if self._periodic_trigger_due(now_ms):
            commands.append(self._trigger(CheckpointType.CHECKPOINT, now_ms, None))
        return commands

    def request_restore(self, request: RestoreRequest, now_ms: int) -> list[Command]:
        """Issue a ``RestoreCommand`` starting the next epoch from ``request.metadata``; refused
        with :class:`NewerCheckpointCompleted` when a checkpoint newer than ``request.newest_seen``
        has completed (see :class:`RestoreRequest`). From then on no checkpoint of an older
        attempt newer than the restored one is announced (:meth:`_superseded`)."""
        last = self._ledger.last_completed
        if request.newest_seen is not None and last is not None and last.checkpoint_id > request.newest_seen:
            raise NewerCheckpointCompleted(self.job_id, last.checkpoint_id, request.newest_seen)
        plan = plan_restore(request.metadata, request.parallelism)
        command = RestoreCommand(
            job_id=self.job_id,
            restore_id=request.restore_id,
            checkpoint_id=request.metadata.checkpoint_id,
            is_savepoint=request.metadata.checkpoint_type.is_savepoint,
            metadata_path=request.metadata_path,
            parallelism=request.parallelism,
            max_parallelism=request.metadata.max_parallelism,
            assignments=plan.assignments,
            epoch=Epoch(max(self._ledger.active_epoch, 0) + 1),
            issued_at=now_ms,
        )
        self._ledger.fold(command)
        return [EmitRestore(command), *self._decide(now_ms)]

    # ------------------------------------------------------------------ queries

    @property
    def pending_checkpoint_ids(self) -> tuple[CheckpointId, ...]:
        """Checkpoints still collecting acks, in id order."""
        return tuple(sorted(self._ledger.pending))

    @property
    def completing_checkpoint_ids(self) -> tuple[CheckpointId, ...]:
        """Fully acknowledged checkpoints not yet announced as completed."""
        return tuple(sorted(self._ledger.completing))

    @property
    def last_completed(self) -> CompletedCheckpoint | None:
        """The newest completed checkpoint or savepoint still retained (one an operator
        discarded, or that left retention, no longer counts)."""
        return self._ledger.last_completed

    @property
    def discarded_by_request(self) -> frozenset[CheckpointId]:
        """The checkpoints and savepoints an operator discarded (``tidemark checkpoints discard``)."""
        return frozenset(self._ledger.discarded_by_request)

    @property
    def newest_discarded_by_request(self) -> CheckpointId | None:
        """The newest of :attr:`discarded_by_request`, if any: a restore older than it may repeat
        output that checkpoint's sinks committed."""
        return max(self._ledger.discarded_by_request, default=None)

    @property
    def active_epoch(self) -> Epoch:
        return self._ledger.active_epoch

    @property
    def is_stopping(self) -> bool:
        """A stop-with-savepoint is in flight: no periodic checkpoints meanwhile."""
        return self._ledger.stopping is not None

    @property
    def is_finishing(self) -> bool:
        """A stop-with-savepoint completed: the attempt is ending; nothing more is triggered."""
        return self._ledger.finishing or (
            self._ledger.registration is not None and self._ledger.registration.finished
        )

    @property
    def suspended_generation(self) -> int | None:
        """The deployment generation the completed stop-with-savepoint was asked for (the job is
        ``SUSPENDED`` for it until a start of that generation or a newer one); None without one."""
        return self._ledger.stop_generation if self._ledger.finishing else None

    @property
    def attempt_failed(self) -> bool:
        """The active attempt failed over for too many checkpoint failures and no new attempt
        has registered yet: the job makes no progress until its supervisor restores it."""
        return self._ledger.attempt_failed

    @property
    def _supervisor_expected(self) -> bool:
        """A supervisor announced the job (an attempt, or a heartbeat this coordinator heard)."""
        return self._ledger.registration is not None or self._liveness.ever_heard

    @property
    def silence(self) -> Silence | None:
        """The job's supervisor is taken for gone, as of the last tick (None: heard, or not expected)."""
        return self._silence

    @property
    def status(self) -> JobStatus:
        """The job's state and why (:mod:`tidemark.checkpoint.job_state`)."""
        ledger = self._ledger
        return job_status(
            ledger.registration, restore_epoch=ledger.restore_epoch, restore_reason=ledger.restore_reason,
            failed_epoch=ledger.failed_epoch, failed_reason=ledger.failed_reason,
            savepoint_finished=ledger.finishing, stop_generation=self.suspended_generation,
            silence=None if self._silence is None else self._silence.reason,
        )

    @property
    def registration(self) -> JobRegistration | None:
        """The newest attempt's registration as it was registered (running or ended), if any."""
        return self._ledger.registration

    @property
    def state(self) -> str:
        """CREATED, RUNNING, RESTARTING, SUSPENDED, FINISHED, CANCELLED or FAILED (see :attr:`status`)."""
        return self.status.state.value

    @property
    def consecutive_failures(self) -> int:
        return self._ledger.failures.consecutive_failures

    def unconfirmed_persists(self) -> list[PersistCheckpoint]:
        """Persist commands the store has not confirmed yet, for the service to send again
        (e.g. after the checkpoint-store restarted); storing is idempotent per checkpoint id."""
        ledger = self._ledger
        return [
            self._persist(ledger.completing[cid]) for cid in sorted(ledger.completing)
            if not ledger.completing[cid].durable and cid not in ledger.store_rejections
        ]

    def savepoint_id(self, request_id: str) -> CheckpointId | None:
        """The id of the savepoint triggered for ``request_id``, once triggered."""
        return self._ledger.savepoint_ids.get(request_id)

    def savepoint_failure(self, request_id: str) -> str | None:
        """Why ``request_id`` failed without being triggered (its attempt ended first), if it did."""
        return self._ledger.failed_requests.get(request_id)

    def stats(self) -> CheckpointStatsSnapshot:
        return self._ledger.stats.snapshot()

    # ------------------------------------------------------------------ decisions

    def _decide(self, now_ms: int) -> list[Command]:
        """Every decision the ledger calls for at ``now_ms``, each folded as it is made."""
        self._ledger.settle()
        return [
            *self._close_completing(now_ms),
            *self._settle_pending(now_ms),
            *self._serve_savepoint_requests(now_ms),
            *self._fail_attempt_if_intolerable(now_ms),
        ]

    def _close_completing(self, now_ms: int) -> list[Command]:
        """Announce checkpoints the store made durable; abort those it rejected, and those whose
        attempt ended before they could be announced (:meth:`_superseded`)."""
        commands: list[Command] = []
        for cid in sorted(self._ledger.completing):
            completed = self._ledger.completing[cid]
            rejection = self._ledger.store_rejections.get(cid)
            superseded = self._superseded(completed)
            if superseded is not None:
                commands.append(self._abort(cid, completed.metadata.epoch, AbortReason.SUPERSEDED, superseded, now_ms))
            elif completed.durable:
                commands.append(self._complete(completed, now_ms))
            elif rejection is not None:
                epoch, why = completed.metadata.epoch, AbortReason.STORE_REJECTED
                commands.append(self._abort(cid, epoch, why, rejection, now_ms))
        return commands

    def _superseded(self, completed: CompletedCheckpoint) -> str | None:
        """Why a fully acknowledged checkpoint may no longer be announced, if so.

        The announcement is what lets the attempt's sinks commit its output. Once a restore
        issued for a newer attempt, or the attempt ended (failed over, cancelled, replaced by an
        empty start), its processes may still be alive (released in place, or on worker hosts
        that did not hear yet), and a commit of a checkpoint newer than the one the next attempt
        restores would be repeated by that attempt. So such a checkpoint is aborted; one no
        newer than the restored checkpoint is still announced (what it commits, the restore
        commits anyway, and the markers make that once). Its ``_metadata``, if already durable,
        stays in storage as a restore source whose buffers no sink committed."""
        ledger, epoch = self._ledger, completed.metadata.epoch
        if ledger.restore_epoch > epoch:
            if completed.checkpoint_id <= ledger.restored_id:
                return None
            return (f"job attempt {ledger.restore_epoch} restores checkpoint {ledger.restored_id}, "
                    f"older than this one of attempt {epoch}")
        running = ledger.running
        if running is None or running.epoch != epoch:
            return f"job attempt {epoch} ended before its checkpoint was announced"
        return None

    def _settle_pending(self, now_ms: int) -> list[Command]:
        """Abort pending checkpoints that cannot complete; persist the fully acknowledged."""
        commands: list[Command] = []
        for pending in self._pending_in_order():
            abort = self._abort_reason(pending)
            if abort is not None:
                commands.append(self._abort(pending.checkpoint_id, pending.epoch, *abort, now_ms))
            elif pending.is_fully_acknowledged:
                commands.append(self._persist(self._ledger.finalize(pending)))
        return commands

    def _fail_attempt_if_intolerable(self, now_ms: int) -> list[Command]:
        """Flink's failure policy: past the tolerance the running attempt fails over (its
        supervisor restores the newest completed checkpoint), never a silent stop. Once per
        attempt: the ``AttemptFailed`` record is folded, and a new attempt clears the count."""
        ledger = self._ledger
        running = ledger.running
        if running is None or not ledger.failures.exceeded:
            return []
        failures = ledger.failures.consecutive_failures
        tolerable = self.options.tolerable_failures
        reason = f"{failures} consecutive checkpoint failures exceed the tolerable {tolerable}"
        record = AttemptFailed(self.job_id, running.epoch, reason, now_ms)
        ledger.fold(record)
        return [FailJob(record), *self._settle_pending(now_ms)]

    def _abort_reason(self, pending: PendingCheckpoint) -> tuple[AbortReason, str] | None:
        ledger = self._ledger
        rejection = ledger.store_rejections.get(pending.checkpoint_id)
        if rejection is not None:
            return AbortReason.STORE_REJECTED, rejection
        if pending.epoch < ledger.active_epoch:
            detail = f"job attempt {ledger.active_epoch} replaced {pending.epoch}"
            return AbortReason.SUPERSEDED, detail
        if ledger.attempt_failed:
            return AbortReason.SUPERSEDED, f"job attempt {ledger.active_epoch} failed over"
        if ledger.running is None:
            ended = ledger.registration.outcome.lower() if ledger.registration is not None else ""
            return AbortReason.JOB_FINISHED, f"the job attempt ended ({ended or 'finished'})"
        last = ledger.last_completed
        if (
            not pending.checkpoint_type.is_savepoint
            and last is not None
            and not last.is_savepoint
            and last.checkpoint_id > pending.checkpoint_id
        ):
            return AbortReason.SUBSUMED, f"checkpoint {last.checkpoint_id} completed first"
        if pending.declined is not None:
            why = AbortReason.SUBSUMED if pending.declined.reason.startswith(DECLINED_SUBSUMED) else AbortReason.DECLINED
            return why, f"{pending.declined.task_id}: {pending.declined.reason}"
        return None

    def _serve_savepoint_requests(self, now_ms: int) -> list[Command]:
        """Trigger the oldest queued request once the attempt runs and no other savepoint is in
        flight: one savepoint at a time, each after the previous one completed or failed."""
        ledger = self._ledger
        if not ledger.savepoint_queue or ledger.running is None or ledger.savepoint_in_flight or self._silence:
            return []
        request = ledger.savepoint_queue[0]
        kind = CheckpointType.STOP_WITH_SAVEPOINT if request.stop else CheckpointType.SAVEPOINT
        return [self._trigger(kind, now_ms, request.target_location)]

    def _periodic_trigger_due(self, now_ms: int) -> bool:
        ledger = self._ledger
        if ledger.running is None or ledger.stopping is not None or self._silence is not None:
            return False
        if ledger.next_periodic_at is None or now_ms < ledger.next_periodic_at:
            return False
        in_flight = len(ledger.pending) + len(ledger.completing)  # savepoints count, as in Flink
        if in_flight >= self.options.effective_max_concurrent:
            return False
        pause = self.options.min_pause_ms
        return pause == 0 or ledger.last_completed_at is None or (
            now_ms >= ledger.last_completed_at + pause
        )

    # ------------------------------------------------------------------ records it writes

    def _trigger(self, kind: CheckpointType, now_ms: int, target: str | None) -> EmitTrigger:
        reg = self._ledger.running
        assert reg is not None
        trigger = CheckpointTrigger(
            job_id=self.job_id,
            checkpoint_id=CheckpointId(self._ledger.last_id + 1),
            checkpoint_type=kind,
            mode=self.options.mode,
            triggered_at=now_ms,
            epoch=reg.epoch,
            target_location=target,
        )
        self._ledger.fold(trigger)
        return EmitTrigger(trigger, reg.source_tasks)

    def _abort(
        self, cid: CheckpointId, epoch: Epoch, reason: AbortReason, detail: str, now_ms: int
    ) -> EmitAborted:
        record = CheckpointAborted(
            job_id=self.job_id,
            checkpoint_id=cid,
            reason=reason.describe(detail),
            aborted_at=now_ms,
            epoch=epoch,
        )
        self._ledger.fold(record)
        return EmitAborted(record)

    def _persist(self, completed: CompletedCheckpoint) -> PersistCheckpoint:
        meta = completed.metadata
        path = metadata_path(meta.job_id, meta.checkpoint_id, meta.checkpoint_type)
        return PersistCheckpoint(meta, path)

    def _complete(self, completed: CompletedCheckpoint, now_ms: int) -> EmitCompleted:
        meta = completed.metadata
        record = CheckpointCompleted(
            job_id=self.job_id,
            checkpoint_id=meta.checkpoint_id,
            checkpoint_type=meta.checkpoint_type,
            completed_at=now_ms,
            metadata_path=metadata_path(meta.job_id, meta.checkpoint_id, meta.checkpoint_type),
            epoch=meta.epoch,
        )
        self._ledger.fold(record)
        return EmitCompleted(record)

    def _pending_in_order(self) -> list[PendingCheckpoint]:
        return [self._ledger.pending[c] for c in sorted(self._ledger.pending)]
