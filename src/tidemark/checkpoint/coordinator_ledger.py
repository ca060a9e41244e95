"""The coordinator's state as a deterministic fold of the records on its topics.

Lifecycle: one ledger per job, starting empty; ``fold(record)`` for every record of the control
topic (registrations, triggers, savepoint requests, completed/aborted notifications, restore
commands, failed attempts), the acks topic (acks, declines) and the checkpoint-events topic (``CheckpointMetadata``
written by the store once a checkpoint is durable, and its rejections), merged by record
timestamp. Reading whole topics one after another also converges as long as the control topic
comes before the acks (see docs/concepts/checkpointing.md).

The ledger never decides anything: it only records facts. Closing a checkpoint is a fact only
when the ``CheckpointCompleted`` / ``CheckpointAborted`` record says so, which is why folding the
same records always gives the same ledger, and folding a record twice changes nothing the second
time. Timestamps come from the records, never from a clock.
"""

from __future__ import annotations

from collections import deque

from tidemark.checkpoint.completed import CompletedCheckpoint
from tidemark.checkpoint.failures import CheckpointFailureManager
from tidemark.checkpoint.outcomes import AbortReason, AckOutcome
from tidemark.checkpoint.pending import PendingCheckpoint
from tidemark.checkpoint.stats import CheckpointStatsTracker
from tidemark.checkpoint_store.store import DELETED_BY_REQUEST, REJECTED_PREFIX
from tidemark.protocol.messages import (
    AttemptFailed,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointDiscarded,
    CheckpointMetadata,
    CheckpointTrigger,
    JobRegistration,
    RestoreCommand,
    SavepointRequest,
    TaskAck,
    TaskDecline,
)
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId

CoordinatorRecord = (
    JobRegistration
    | CheckpointTrigger
    | CheckpointCompleted
    | CheckpointAborted
    | SavepointRequest
    | RestoreCommand
    | AttemptFailed
    | TaskAck
    | TaskDecline
    | CheckpointMetadata
    | CheckpointDiscarded
)
"""Every record the coordinator folds; records of another job are ignored."""


class CheckpointLedger:
    """Registrations, pending and completing checkpoints, savepoint requests and failures."""

    def __init__(
        self, job_id: JobId, interval_ms: int, tolerable_failures: int, history: int
    ) -> None:
        self.job_id = job_id
        self.interval_ms = interval_ms
        self.registration: JobRegistration | None = None
        self.restore_epoch: Epoch = Epoch(-1)
        self.restored_id: CheckpointId = CheckpointId(0)  # what the newest restore command restores
        self.failed_epoch: Epoch = Epoch(-1)  # the newest attempt declared failed
        self.failed_reason: str | None = None  # why (its AttemptFailed's reason)
        self.restore_reason: str | None = None  # what the newest restore command restores
        self.last_id: CheckpointId = CheckpointId(0)
        self.pending: dict[CheckpointId, PendingCheckpoint] = {}
        self.completing: dict[CheckpointId, CompletedCheckpoint] = {}
        self.last_completed: CompletedCheckpoint | None = None  # the newest of ``completed``
        self.completed: dict[CheckpointId, CompletedCheckpoint] = {}  # announced, not discarded since
        self.discarded_by_request: set[CheckpointId] = set()  # by an operator (a corrupted checkpoint)
        self.last_completed_at: int | None = None
        self.next_periodic_at: int | None = None
        self.savepoint_queue: deque[SavepointRequest] = deque()
        self.seen_requests: set[str] = set()
        self.savepoint_ids: dict[str, CheckpointId] = {}
        self.failed_requests: dict[str, str] = {}  # request id -> why it was never triggered
        self.store_rejections: dict[CheckpointId, str] = {}
        self.early_confirmations: dict[CheckpointId, CheckpointMetadata] = {}
        self.announced: dict[CheckpointId, CheckpointCompleted] = {}
        self.stopping: CheckpointId | None = None
        self.finishing = False
        self.stop_generations: dict[CheckpointId, int] = {}  # stop-with-savepoint -> the generation that asked
        self.stop_generation: int | None = None  # of the completed stop-with-savepoint (while finishing)
        self.failures = CheckpointFailureManager(tolerable_failures)
        self.stats = CheckpointStatsTracker(history)

    # ------------------------------------------------------------------ derived facts

    @property
    def active_epoch(self) -> Epoch:
        """The newest attempt anyone announced (by registration or restore command)."""
        registered = self.registration.epoch if self.registration is not None else -1
        return Epoch(max(registered, self.restore_epoch))

    @property
    def running(self) -> JobRegistration | None:
        """The registration of the active attempt while it may be checkpointed."""
        reg = self.registration
        if reg is None or reg.epoch != self.active_epoch or reg.finished or self.finishing:
            return None
        if reg.epoch <= self.failed_epoch:
            return None  # failed: nothing is triggered until a new attempt registers
        return reg if reg.tasks else None

    @property
    def attempt_failed(self) -> bool:
        """The active attempt was declared failed and no new attempt has started yet."""
        reg = self.registration
        return reg is not None and reg.epoch == self.active_epoch and reg.epoch <= self.failed_epoch

    @property
    def ended(self) -> str | None:
        """Why the active attempt takes no savepoint any more (a stop-with-savepoint completed, or
        its supervisor registered it as ended: finished, cancelled, failed, restarting), until a
        restore announces a newer attempt; None while it may still run."""
        reg = self.registration
        if self.finishing:
            return "the job stopped with a savepoint"
        if reg is None or not reg.finished or reg.epoch < self.restore_epoch:
            return None
        how = f" ({reg.outcome}: {reg.reason})" if reg.outcome and reg.reason else ""
        return f"job attempt {reg.epoch} ended{how}"

    @property
    def savepoint_in_flight(self) -> bool:
        """A savepoint is still collecting acks or waiting for the store."""
        return any(c.checkpoint_type.is_savepoint for c in (*self.pending.values(), *self.completing.values()))

    def is_closed(self, checkpoint_id: CheckpointId) -> bool:
        """Triggered once and no longer pending or completing."""
        return (
            checkpoint_id <= self.last_id
            and checkpoint_id not in self.pending
            and checkpoint_id not in self.completing
        )

    # ------------------------------------------------------------------ the fold

    def fold(self, record: CoordinatorRecord) -> AckOutcome | None:
        """Apply one record; returns the outcome for a ``TaskAck``, else None."""
        if getattr(record, "job_id", self.job_id) != self.job_id:
            return AckOutcome.UNKNOWN if isinstance(record, TaskAck) else None
        match record:
            case TaskAck():
                return self._fold_ack(record)
            case TaskDecline():
                self._fold_decline(record)
            case CheckpointTrigger():
                self._fold_trigger(record)
            case CheckpointMetadata():
                self._fold_stored(record)
            case CheckpointDiscarded():
                if record.reason.startswith(REJECTED_PREFIX):
                    self._fold_store_rejection(record)
                else:
                    self._fold_discarded(record)
            case CheckpointCompleted():
                self._fold_completed(record)
            case CheckpointAborted():
                self._fold_aborted(record)
            case JobRegistration():
                self._fold_registration(record)
            case SavepointRequest():
                self._fold_savepoint_request(record)
            case RestoreCommand():
                self._fold_restore(record)
            case AttemptFailed():
                if record.epoch >= self.failed_epoch:
                    self.failed_epoch, self.failed_reason = record.epoch, record.reason
            case _:
                raise TypeError(f"not a coordinator record: {type(record).__name__}")
        return None

    def finalize(self, pending: PendingCheckpoint) -> CompletedCheckpoint:
        """Move a fully acknowledged checkpoint to the completing stage (awaiting the store)."""
        completed = pending.finalize()
        del self.pending[pending.checkpoint_id]
        self.completing[pending.checkpoint_id] = completed
        return completed

    def _fold_ack(self, ack: TaskAck) -> AckOutcome:
        pending = self.pending.get(ack.checkpoint_id)
        if pending is not None:
            outcome = pending.acknowledge(ack)
            if outcome is AckOutcome.SUCCESS:
                self.stats.report_task_ack(ack.checkpoint_id, ack.task.task_id, ack.timings)
            return outcome
        completing = self.completing.get(ack.checkpoint_id)
        if completing is not None:
            known = any(t.task_id == ack.task.task_id for t in completing.metadata.tasks)
            same_epoch = ack.epoch == completing.metadata.epoch
            return AckOutcome.DUPLICATE if known and same_epoch else AckOutcome.UNKNOWN
        if self.is_closed(ack.checkpoint_id):
            return AckOutcome.DISCARDED
        return AckOutcome.UNKNOWN

    def _fold_decline(self, decline: TaskDecline) -> None:
        pending = self.pending.get(decline.checkpoint_id)
        if pending is not None:
            pending.decline(decline)

    def _fold_trigger(self, trigger: CheckpointTrigger) -> None:
        if trigger.checkpoint_id <= self.last_id:
            return  # our own record seen again, or one already closed
        cid = trigger.checkpoint_id
        self.last_id = cid
        kind = trigger.checkpoint_type
        if kind.is_savepoint and self.savepoint_queue:
            request = self.savepoint_queue.popleft()
            self.savepoint_ids[request.request_id] = cid
            if request.stop and request.generation is not None:
                self.stop_generations[cid] = request.generation
        reg = self.registration
        if reg is None or reg.epoch != trigger.epoch or not reg.tasks:
            return
        tasks = frozenset(t.task_id for t in reg.tasks)
        self.pending[cid] = PendingCheckpoint(trigger, tasks, reg.max_parallelism)
        self.stats.report_triggered(cid, kind, trigger.triggered_at, len(tasks))
        early = self.early_confirmations.pop(cid, None)
        if early is not None:
            self._fold_stored(early)
        if kind is CheckpointType.CHECKPOINT:
            self.next_periodic_at = trigger.triggered_at + self.interval_ms
        elif kind is CheckpointType.STOP_WITH_SAVEPOINT:
            self.stopping = cid

    def _fold_stored(self, stored: CheckpointMetadata) -> None:
        cid = stored.checkpoint_id
        completing = self.completing.get(cid)
        if completing is not None:
            self.completing[cid] = completing.confirmed(stored)
            return
        pending = self.pending.pop(cid, None)
        if pending is not None:  # replay: the acks that completed it may follow on their topic
            timings = {a.task.task_id: a.timings for a in pending.acks}
            self.completing[cid] = CompletedCheckpoint(stored, timings, durable=True)
            return
        announced = self.announced.pop(cid, None)
        if announced is not None:  # replay: the notification came before this confirmation
            self._record_completion(CompletedCheckpoint(stored, durable=True), announced)
        elif cid > self.last_id:  # replay: read before the trigger on the control topic
            self.early_confirmations[cid] = stored

    def settle(self) -> None:
        """Forget confirmations whose trigger never showed up, keeping their ids used."""
        if self.early_confirmations:
            self.last_id = max(self.last_id, max(self.early_confirmations))
            self.early_confirmations.clear()

    def _fold_store_rejection(self, record: CheckpointDiscarded) -> None:
        """The store refused a checkpoint it was asked to persist (it never became durable)."""
        completing = self.completing.get(record.checkpoint_id)
        if completing is not None and not completing.durable:
            self.store_rejections[record.checkpoint_id] = record.reason
        elif record.checkpoint_id in self.pending:  # replay: its acks may follow on their topic
            self.store_rejections[record.checkpoint_id] = record.reason

    def _fold_discarded(self, record: CheckpointDiscarded) -> None:
        """A retained checkpoint left retention: the oldest by retention, or any one an operator
        discarded (``DELETED_BY_REQUEST``). The newest completed checkpoint is then the newest
        one still retained, so a restore of that one is not refused as older than a checkpoint
        that is gone (:meth:`CheckpointCoordinator.request_restore`)."""
        cid = record.checkpoint_id
        if record.reason == DELETED_BY_REQUEST:
            self.discarded_by_request.add(cid)
        self.stats.report_discarded(cid)
        if self.completed.pop(cid, None) is not None and self.last_completed is not None \
                and self.last_completed.checkpoint_id == cid:
            self.last_completed = self.completed[max(self.completed)] if self.completed else None

    def _fold_completed(self, record: CheckpointCompleted) -> None:
        cid = record.checkpoint_id
        self.last_id = max(self.last_id, cid)
        completed = self.completing.pop(cid, None)
        pending = self.pending.pop(cid, None)
        if completed is None and pending is not None and pending.is_fully_acknowledged:
            completed = pending.finalize()
        if completed is None and pending is None:
            return  # already closed (or never known): nothing changes
        self.last_completed_at = record.completed_at
        self.failures.on_completed(record.checkpoint_type)
        if completed is not None:
            self._record_completion(completed, record)
        else:  # replay: its acks or store confirmation are still to come on their topics
            self.announced[cid] = record
        if record.checkpoint_type is CheckpointType.STOP_WITH_SAVEPOINT:
            self.finishing = True
            self.stop_generation = self.stop_generations.pop(cid, None)
            self.stopping = None
            self._fail_queued_requests(f"the job stopped with savepoint {cid} before this request was triggered")

    def _record_completion(
        self, completed: CompletedCheckpoint, record: CheckpointCompleted
    ) -> None:
        cid = completed.checkpoint_id
        if cid not in self.discarded_by_request:  # replay: read back after its discard
            self.completed[cid] = completed
            last = self.last_completed
            if last is None or cid > last.checkpoint_id:
                self.last_completed = completed
        self.stats.report_completed(completed.metadata, record.completed_at, record.metadata_path)

    def _fold_aborted(self, record: CheckpointAborted) -> None:
        cid = record.checkpoint_id
        self.last_id = max(self.last_id, cid)
        self.store_rejections.pop(cid, None)
        pending = self.pending.pop(cid, None)
        completing = self.completing.pop(cid, None)  # rejected by the store, or superseded
        if pending is not None:
            kind, triggered_at = pending.checkpoint_type, pending.triggered_at
        elif completing is not None:
            kind, triggered_at = completing.checkpoint_type, completing.metadata.triggered_at
        else:
            return
        self.failures.on_aborted(kind, AbortReason.parse(record.reason))
        self.stats.report_failed(cid, kind, triggered_at, record.aborted_at, record.reason)
        if self.stopping == cid:
            self.stopping = None

    def _fold_registration(self, reg: JobRegistration) -> None:
        current = self.registration
        if current is not None and reg.epoch < current.epoch:
            return
        if current is None or reg.epoch > current.epoch:
            # a new attempt's first checkpoint at once: its sources take it after their first
            # records (runtime.worker.runner), so its first results are committed without waiting
            # an interval; the next ones an interval after it
            self.next_periodic_at = reg.registered_at
            self.finishing = False
            self.stopping = None
            self.failures.reset()  # a new attempt starts with its full tolerance
        self.registration = reg
        if self.ended is not None:
            self._fail_queued_requests(f"{self.ended} before this request was triggered")

    def _fold_savepoint_request(self, request: SavepointRequest) -> None:
        if request.request_id in self.seen_requests:
            return
        self.seen_requests.add(request.request_id)
        self.savepoint_queue.append(request)
        if self.ended is not None:
            self._fail_queued_requests(f"{self.ended}; a savepoint needs a running job attempt")

    def _fail_queued_requests(self, reason: str) -> None:
        """The attempt can no longer serve the queued requests: each ends FAILED with ``reason``
        (Flink fails queued savepoint requests when the job terminates or fails over)."""
        while self.savepoint_queue:
            self.failed_requests[self.savepoint_queue.popleft().request_id] = reason

    def _fold_restore(self, command: RestoreCommand) -> None:
        if command.epoch <= self.restore_epoch:
            return
        self.restore_epoch = command.epoch
        self.restored_id = command.checkpoint_id
        source = "savepoint" if command.is_savepoint else "checkpoint"
        self.restore_reason = f"restoring {source} {command.checkpoint_id} as attempt {command.epoch}"
        self.last_id = max(self.last_id, command.checkpoint_id)
        self.failures.reset()
        self.stats.report_restored(command.checkpoint_id, command.issued_at)
        self.stopping = None
        self.finishing = False
