"""Periodic savepoints and the retained savepoint history, on the coordinator's timer.

The decisions are :mod:`tidemark.checkpoint.savepoint_schedule`'s; this is their edge: a periodic
savepoint is an ordinary ``SavepointRequest`` (``stop=False``) on the control topic, as
``POST /api/v1/jobs/{job}/savepoints`` writes, and a disposed savepoint a ``CheckpointDiscarded``
request the checkpoint-store carries out, as ``DELETE /api/v1/jobs/{job}/checkpoints/{id}``.
"""

from __future__ import annotations

import asyncio
import uuid

from tidemark.checkpoint import CheckpointCoordinator, CheckpointStatus
from tidemark.checkpoint.job_state import JobState
from tidemark.checkpoint.savepoint_schedule import SavepointPolicy, periodic_savepoint_due, savepoints_to_dispose
from tidemark.checkpoint_store import catalog
from tidemark.chassis.logs import get_logger
from tidemark.clock import now_ms
from tidemark.protocol.messages import SavepointRequest
from tidemark.services.coordinator.edge import CoordinatorEdge
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, JobId

log = get_logger(__name__)


class PeriodicSavepoints:
    """Call :meth:`tick` about once a second; it acts only once the coordinator is live."""

    def __init__(self, edge: CoordinatorEdge, storage: CheckpointStorage, policy: SavepointPolicy) -> None:
        self.edge = edge
        self.storage = storage
        self.policy = policy
        self._since: dict[JobId, int] = {}  # last periodic request, or when the job was first seen running
        self._requests: dict[JobId, SavepointRequest] = {}
        self._history_checked: dict[JobId, CheckpointId] = {}  # the last savepoint the history was trimmed after

    async def tick(self) -> None:
        if not self.edge.live:
            return
        now = now_ms()
        for job, coordinator in list(self.edge.coordinators.items()):
            if self.policy.periodic:
                await self._trigger_if_due(job, coordinator, now)
            if self.policy.retained:
                await self._trim_history(job, coordinator)

    async def _trigger_if_due(self, job: JobId, coordinator: CheckpointCoordinator, now: int) -> None:
        running = (coordinator.status.state is JobState.RUNNING and not coordinator.is_stopping
                   and not coordinator.is_finishing)
        if not running:
            self._since.pop(job, None)
            return
        self._since.setdefault(job, now)
        last = coordinator.stats().last_savepoint
        since = max(self._since[job], (last.ended_at or 0) if last is not None else 0)
        if not periodic_savepoint_due(self.policy, running=True, request_open=self._open(coordinator, job, now),
                                      since_ms=since, now_ms=now):
            return
        request = SavepointRequest(job_id=job, request_id=uuid.uuid4().hex, stop=False, requested_at=now,
                                   target_location=None)
        self._requests[job] = request
        self._since[job] = now
        await self.edge.request_savepoint(request)
        log.info("periodic savepoint requested", job=job, request_id=request.request_id)

    def _open(self, coordinator: CheckpointCoordinator, job: JobId, now: int) -> bool:
        """The job's previous periodic request is queued or its savepoint in flight (a request
        not heard of within the checkpoint timeout counts as ended)."""
        request = self._requests.get(job)
        if request is None or coordinator.savepoint_failure(request.request_id) is not None:
            return False
        savepoint_id = coordinator.savepoint_id(request.request_id)
        if savepoint_id is None:
            return now - request.requested_at < self.edge.options.timeout_ms
        entry = next((e for e in coordinator.stats().history if e.checkpoint_id == savepoint_id), None)
        return entry is not None and entry.status is CheckpointStatus.IN_PROGRESS

    async def _trim_history(self, job: JobId, coordinator: CheckpointCoordinator) -> None:
        last = coordinator.stats().last_savepoint
        if last is None or self._history_checked.get(job) == last.checkpoint_id:
            return
        self._history_checked[job] = last.checkpoint_id
        loop = asyncio.get_running_loop()
        listing = await loop.run_in_executor(
            None, lambda: catalog.list_retained(self.storage, job, savepoints=True))
        retained = [e.metadata.checkpoint_id for e in listing.entries]
        for savepoint_id in savepoints_to_dispose(self.policy, retained):
            if savepoint_id not in coordinator.discarded_by_request:
                await self.edge.dispose(job, savepoint_id)
                log.info("savepoint disposed: beyond the retained history", job=job, savepoint_id=savepoint_id,
                         retained=self.policy.retained)
