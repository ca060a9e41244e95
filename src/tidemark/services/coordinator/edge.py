"""The coordinator's edge: Kafka records in, the pure coordinator's commands out to Kafka.

Lifecycle: the service replays the control, acks, checkpoint-events and heartbeats topics from the start
(``on_record`` with ``replayed=True`` only collects), then ``on_caught_up`` merges them by
record timestamp (the order the coordinator saw them in) and rebuilds one
:class:`CheckpointCoordinator` per job from those records and carries out the commands still owed;
from then on every record is applied as it arrives and ``tick`` runs periodically.

A ``CheckpointMetadata`` on the *control* topic is this coordinator's request to the
checkpoint-store; only the one on the *checkpoint-events* topic (the store's confirmation that
``_metadata`` is durable) is folded. Likewise a ``CheckpointDiscarded`` on the control topic is an
operator's discard request (:meth:`CoordinatorEdge.request_discard`); the store's on the
checkpoint-events topic is the fact.

A ``SupervisorHeartbeat`` is not folded: a live one tells the job's coordinator its supervisor is
alive, a replayed one is dropped (a restarted coordinator has heard nobody yet). Silence counts
only while the reader confirms it is receiving (``reader.delivered_at_ms``, see
:mod:`tidemark.checkpoint.liveness`), so neither this coordinator's restart nor a broker outage
turns a job FAILED.

A ``JobRegistration`` whose worker assignment does not fit its tasks
(:func:`tidemark.checkpoint.task_workers.registration_problem`) is rejected before it is folded:
:class:`InvalidRegistration` logs the problem and dead-letters the record (live) or only logs it
again (replayed).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any, get_args

from tidemark.checkpoint import (
    CheckpointCoordinator,
    CheckpointingOptions,
    Command,
    CoordinatorRecord,
    EmitAborted,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    FailJob,
    PersistCheckpoint,
    RestoreRequest,
)
from tidemark.checkpoint.liveness import SILENCE_MS, DeliveryWatch
from tidemark.checkpoint.task_workers import registration_problem
from tidemark.checkpoint_store.store import DELETED_BY_REQUEST
from tidemark.clock import now_ms
from tidemark.protocol.messages import (
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    RestoreCommand,
    SavepointRequest,
    SupervisorHeartbeat,
)
from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord, RejectedRecord
from tidemark.chassis.logs import get_logger
from tidemark.services.coordinator.metrics import JOB_FAILURES, SAVEPOINTS, CoordinatorMetrics
from tidemark.types import CheckpointId, JobId

log = get_logger(__name__)
RECORD_TYPES: tuple[type, ...] = get_args(CoordinatorRecord)
PERSIST_RESEND_S = 10.0


class InvalidRegistration(RejectedRecord):
    """A job registration the coordinator does not fold (the message says why)."""

    reason = "invalid-registration"


class CoordinatorEdge:
    def __init__(self, app: ServiceApp, options: CheckpointingOptions, *, silence_ms: int = SILENCE_MS) -> None:
        self.app = app
        self.options = options
        self.silence_ms = silence_ms
        self.delivery = DeliveryWatch()
        self._delivered_at: Callable[[], int | None] = lambda: None
        self._confirmation: int | None = None
        self.coordinators: dict[JobId, CheckpointCoordinator] = {}
        self.metrics: dict[JobId, CoordinatorMetrics] = {}
        self._replayed: dict[JobId, list[tuple[int, int, Any]]] = defaultdict(list)
        self.savepoint_requests: dict[str, SavepointRequest] = {}
        self.live = False
        self._last_resend = time.monotonic()

    def watch_delivery(self, delivered_at: Callable[[], int | None]) -> None:
        """Where the reader's newest delivery confirmation is read (``EventLogReader.delivered_at_ms``)."""
        self._delivered_at = delivered_at

    def _coordinator(self, job: JobId) -> CheckpointCoordinator:
        if job not in self.coordinators:
            self.coordinators[job] = CheckpointCoordinator(job, self.options, silence_ms=self.silence_ms)
            self.metrics[job] = CoordinatorMetrics(job, self.options.timeout_ms)
        return self.coordinators[job]

    async def on_record(self, message: Any, raw: RawRecord, replayed: bool) -> None:
        if isinstance(message, SupervisorHeartbeat):
            if not replayed:
                self._coordinator(message.job_id).heard(message, now_ms())
            return
        if not isinstance(message, RECORD_TYPES):
            return
        if isinstance(message, (CheckpointMetadata, CheckpointDiscarded)) and raw.topic != self.app.topics.checkpoint_events:
            return  # on the control topic a request to the checkpoint-store, not its answer
        if isinstance(message, JobRegistration) and (problem := registration_problem(message)) is not None:
            raise InvalidRegistration(f"registration of job {message.job_id} attempt {message.epoch} "
                                      f"rejected: {problem}")
        if isinstance(message, SavepointRequest):
            self.savepoint_requests.setdefault(message.request_id, message)
        if not self.live:
            self._replayed[message.job_id].append((raw.timestamp or 0, raw.offset, message))
            return
        await self._run(message.job_id, self._coordinator(message.job_id).apply(message, now_ms()))

    async def on_caught_up(self) -> None:
        for job, stamped in self._replayed.items():
            records = [message for _, _, message in sorted(stamped, key=lambda r: (r[0], r[1]))]
            commands = self._coordinator(job).replay(records, now_ms())
            log.info("coordinator rebuilt", job=job, records=len(records), owed=len(commands))
            await self._run(job, commands)
        self._replayed.clear()
        self.live = True

    async def tick(self) -> None:
        if not self.live:
            return
        resend = time.monotonic() - self._last_resend > PERSIST_RESEND_S
        now = now_ms()
        confirmation = self._delivered_at()
        if confirmation is not None and confirmation != self._confirmation:
            self._confirmation = confirmation
            self.delivery.confirmed(confirmation)
        listening_since = self.delivery.listening_since(now)
        for job, coordinator in list(self.coordinators.items()):
            was_silent = coordinator.silence is not None
            commands = coordinator.tick(now, listening_since=listening_since)
            if (coordinator.silence is not None) != was_silent:
                self._log_liveness(job, coordinator)
            if resend:  # the store may have missed a request while it was down
                commands = [*coordinator.unconfirmed_persists(), *commands]
            await self._run(job, commands)
        if resend:
            self._last_resend = time.monotonic()

    @staticmethod
    def _log_liveness(job: JobId, coordinator: CheckpointCoordinator) -> None:
        if coordinator.silence is not None:
            log.error("job supervisor silent; the job is not running", job=job, reason=coordinator.silence.reason)
        else:
            log.info("job supervisor heard again", job=job, state=coordinator.state)

    async def request_savepoint(self, request: SavepointRequest) -> None:
        """Write an operator's savepoint request to the control topic; the coordinator acts on it
        when it reads the record back (so a restarted coordinator sees it too)."""
        await self.app.publish(self.app.topics.control, request, request.job_id.encode())
        self.savepoint_requests.setdefault(request.request_id, request)

    async def dispose(self, job: JobId, checkpoint_id: CheckpointId) -> None:
        """Ask the checkpoint-store to discard a retained checkpoint or savepoint (a
        ``CheckpointDiscarded`` with ``DELETED_BY_REQUEST`` on the control topic); no wait."""
        request = CheckpointDiscarded(job, checkpoint_id, now_ms(), DELETED_BY_REQUEST)
        await self.app.publish(self.app.topics.control, request, job.encode())

    async def request_discard(self, job: JobId, checkpoint_id: CheckpointId, timeout_s: float) -> bool:
        """Ask the checkpoint-store to discard a retained checkpoint (a ``CheckpointDiscarded``
        with ``DELETED_BY_REQUEST`` on the control topic); True once the store's discard is
        folded (the job's newest completed checkpoint has dropped back), False after ``timeout_s``."""
        await self.dispose(job, checkpoint_id)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            coordinator = self.coordinators.get(job)
            if coordinator is not None and checkpoint_id in coordinator.discarded_by_request:
                return True
            await asyncio.sleep(0.05)
        return False

    async def request_restore(self, request: RestoreRequest) -> RestoreCommand:
        """Have the job's coordinator restore from ``request`` (live only); carry out its commands."""
        if not self.live:
            raise RuntimeError("the coordinator is still replaying its topics")
        job = request.metadata.job_id
        commands = self._coordinator(job).request_restore(request, now_ms())
        await self._run(job, commands)
        return next(c.restore for c in commands if isinstance(c, EmitRestore))

    async def _run(self, job: JobId, commands: list[Command]) -> None:
        for command in commands:
            await self._carry_out(job, command)
        coordinator = self.coordinators.get(job)
        if coordinator is not None:
            self.metrics[job].update(coordinator.stats())
            self.metrics[job].update_state(coordinator.status.state, coordinator.attempt_failed)

    async def _carry_out(self, job: JobId, command: Command) -> None:
        topics, key = self.app.topics, job.encode()
        if isinstance(command, EmitTrigger):
            await self.app.publish(topics.control, command.trigger, key)
        elif isinstance(command, PersistCheckpoint):
            await self.app.publish(topics.control, command.metadata, key)
        elif isinstance(command, EmitCompleted):
            if command.completed.checkpoint_type.is_savepoint:
                SAVEPOINTS.labels(job, "completed").inc()
            await self.app.publish(topics.control, command.completed, key)
        elif isinstance(command, EmitAborted):
            await self.app.publish(topics.control, command.aborted, key)
        elif isinstance(command, EmitRestore):
            await self.app.publish(topics.control, command.restore, key)
        elif isinstance(command, FailJob):
            JOB_FAILURES.labels(job).inc()
            log.error("job attempt failed: too many checkpoint failures; failing over", job=job,
                      epoch=command.failed.epoch, reason=command.failed.reason)
            await self.app.publish(topics.control, command.failed, key)
        log.info("command", job=job, command=type(command).__name__)
