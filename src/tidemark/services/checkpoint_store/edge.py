"""The checkpoint-store's edge: persist requests in, durable metadata and events out.

Lifecycle: replay the checkpoint-events topic (the store's own log) and the control topic from
the start; on catching up, rebuild one :class:`PersistentCheckpointStore` per job from its events
(finishing any interrupted discard), then serve the persist requests (``CheckpointMetadata`` on
the control topic) it has not seen, and from then on each new one as it arrives. The files tasks
wrote for an aborted checkpoint (``CheckpointAborted`` on the control topic) are deleted, after a
restart too, and again ``LATE_SWEEP_S`` later (what a task finishing its snapshot wrote after the
abort: :meth:`PersistentCheckpointStore.sweep_late`). A ``CheckpointDiscarded`` on the *control* topic is an operator's discard request
(``DELETED_BY_REQUEST``, written by the coordinator's API); the store carries it out (its own
``CheckpointDiscarded`` on the checkpoint-events topic is the fact), and a request for a
checkpoint it no longer retains changes nothing, so one replayed after a restart is harmless.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from prometheus_client import Counter, Gauge

from tidemark.clock import now_ms
from tidemark.checkpoint_store import CheckpointStoreOptions, PersistentCheckpointStore
from tidemark.checkpoint_store.layout import metadata_path
from tidemark.checkpoint_store.store import DELETED_BY_REQUEST, state_files
from tidemark.kafka.clients import base_config
from tidemark.kafka.kafka_event_log import KafkaEventLog
from tidemark.protocol.messages import CheckpointAborted, CheckpointDiscarded, CheckpointMetadata
from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.chassis.logs import get_logger
from tidemark.storage import open_storage
from tidemark.types import JobId

log = get_logger(__name__)
LATE_SWEEP_S = 10.0  # after an abort: the deletion again, for files a task was still writing

RETAINED = Gauge("tidemark_checkpoint_store_retained_checkpoints", "Checkpoints retained", ["job"])
RETAINED_SAVEPOINTS = Gauge("tidemark_checkpoint_store_retained_savepoints", "Savepoints retained", ["job"])
DISCARDED = Counter("tidemark_checkpoint_store_discarded_total", "Checkpoints that left retention", ["job"])
STORED_BYTES = Gauge("tidemark_checkpoint_store_bytes",
                     "Bytes of the state files the retained checkpoints and savepoints reference", ["job"])
SHARED_FILES = Gauge("tidemark_checkpoint_store_shared_files",
                     "Shared (incremental) state files referenced by retained checkpoints", ["job"])
FILES_DELETED = Counter("tidemark_checkpoint_store_files_deleted_total",
                        "Files deleted from checkpoint storage (state files and _metadata)", ["job"])


class CheckpointStoreEdge:
    def __init__(self, app: ServiceApp, storage_url: str, retained_checkpoints: int) -> None:
        self.app = app
        self.storage = open_storage(storage_url)
        self.options = CheckpointStoreOptions(retained_checkpoints=retained_checkpoints)
        self.event_log = KafkaEventLog(base_config(app.settings, app.bootstrap), app.topics.checkpoint_events)
        self.stores: dict[JobId, PersistentCheckpointStore] = {}
        self._events: dict[JobId, list[Any]] = defaultdict(list)
        self._requests: list[CheckpointMetadata] = []
        self._aborted: list[CheckpointAborted] = []
        self._discard_requests: list[CheckpointDiscarded] = []
        self._serial = asyncio.Lock()  # one store operation at a time (each runs on an executor thread)
        self._late_sweeps: set[asyncio.Task[None]] = set()
        self.live = False

    def _store(self, job: JobId) -> PersistentCheckpointStore:
        if job not in self.stores:
            self.stores[job] = PersistentCheckpointStore(job, self.storage, self.event_log, self.options)
        return self.stores[job]

    async def on_record(self, message: Any, raw: RawRecord, replayed: bool) -> None:
        if raw.topic == self.app.topics.checkpoint_events:
            if not self.live and isinstance(message, (CheckpointMetadata, CheckpointDiscarded)):
                self._events[message.job_id].append(message)
            return  # live: our own appends, already applied
        if isinstance(message, CheckpointMetadata):
            if self.live:
                await self._persist(message)
            else:
                self._requests.append(message)
        elif isinstance(message, CheckpointAborted):
            if self.live:
                await self._discard_aborted(message)
                self._schedule_late_sweep(message)
            else:
                self._aborted.append(message)
        elif isinstance(message, CheckpointDiscarded) and message.reason == DELETED_BY_REQUEST:
            if self.live:
                await self._discard_by_request(message)
            else:
                self._discard_requests.append(message)

    async def on_caught_up(self) -> None:
        loop = asyncio.get_running_loop()
        now = now_ms()
        for job, events in self._events.items():
            deleted = await loop.run_in_executor(None, self._store(job).recover, events, now)
            log.info("store rebuilt", job=job, events=len(events), finished_deletes=len(deleted))
            FILES_DELETED.labels(job).inc(len(deleted))
        self._events.clear()
        for request in self._requests:
            if not self._store(request.job_id).store.has_seen(request.checkpoint_id):
                await self._persist(request)
        self._requests.clear()
        for aborted in self._aborted:  # files a crash left behind; deleting again is a no-op
            await self._discard_aborted(aborted)
        self._aborted.clear()
        for request in self._discard_requests:  # a no-op for those carried out before a restart
            await self._discard_by_request(request)
        self._discard_requests.clear()
        self.live = True
        for job in self.stores:
            self._update_metrics(job)

    async def _persist(self, metadata: CheckpointMetadata) -> None:
        async with self._serial:
            await self._persist_now(metadata)

    async def _persist_now(self, metadata: CheckpointMetadata) -> None:
        store = self._store(metadata.job_id)
        if store.store.has_seen(metadata.checkpoint_id) and store.store.get(metadata.checkpoint_id) is None:
            log.info("persist request for a discarded checkpoint ignored", job=metadata.job_id,
                     checkpoint=metadata.checkpoint_id)
            return
        before = len(store.store.retained())
        referenced = _referenced_paths(store)
        event = await asyncio.get_running_loop().run_in_executor(
            None, store.store_checkpoint, metadata, now_ms())
        log.info("checkpoint stored" if isinstance(event, CheckpointMetadata) else "checkpoint rejected",
                 job=metadata.job_id, checkpoint=metadata.checkpoint_id)
        if isinstance(event, CheckpointMetadata) and store.swept:
            log.info("files written for aborted checkpoints after their abort deleted", job=metadata.job_id,
                     files=len(store.swept))
            FILES_DELETED.labels(metadata.job_id).inc(len(store.swept))
        self._update_metrics(metadata.job_id, discarded=max(0, before + 1 - len(store.store.retained())),
                             deleted=len(referenced - _referenced_paths(store)))

    async def _discard_aborted(self, aborted: CheckpointAborted) -> None:
        store = self._store(aborted.job_id)
        async with self._serial:
            deleted = await asyncio.get_running_loop().run_in_executor(
                None, store.discard_aborted, aborted.checkpoint_id)
        if deleted:
            log.info("aborted checkpoint's files deleted", job=aborted.job_id, checkpoint=aborted.checkpoint_id,
                     files=len(deleted))
            FILES_DELETED.labels(aborted.job_id).inc(len(deleted))

    def _schedule_late_sweep(self, aborted: CheckpointAborted) -> None:
        """The deletion again ``LATE_SWEEP_S`` after a live abort (not for those replayed at a
        start: whatever their tasks wrote has long landed, and the first deletion took it)."""
        sweep = asyncio.get_running_loop().create_task(self._sweep_late(aborted))
        self._late_sweeps.add(sweep)  # kept until done: the loop holds tasks weakly
        sweep.add_done_callback(self._late_sweeps.discard)

    async def _sweep_late(self, aborted: CheckpointAborted) -> None:
        await asyncio.sleep(LATE_SWEEP_S)
        store = self._store(aborted.job_id)
        async with self._serial:
            swept = await asyncio.get_running_loop().run_in_executor(None, store.sweep_late, aborted.checkpoint_id)
        if swept:
            log.info("files written for an aborted checkpoint after its abort deleted", job=aborted.job_id,
                     checkpoint=aborted.checkpoint_id, files=len(swept))
            FILES_DELETED.labels(aborted.job_id).inc(len(swept))

    async def _discard_by_request(self, request: CheckpointDiscarded) -> None:
        store = self._store(request.job_id)
        async with self._serial:
            event = await asyncio.get_running_loop().run_in_executor(
                None, store.discard_by_request, request.checkpoint_id, now_ms())
        if event is None:
            log.info("discard request for a checkpoint not retained ignored", job=request.job_id,
                     checkpoint=request.checkpoint_id)
            return
        log.warning("checkpoint discarded by request", job=request.job_id, checkpoint=request.checkpoint_id,
                    files=len(event.released_files))
        self._update_metrics(request.job_id, discarded=1, deleted=len(event.released_files))

    def _update_metrics(self, job: JobId, discarded: int = 0, deleted: int = 0) -> None:
        store = self._store(job).store
        retained = store.retained()
        savepoints = sum(1 for m in retained if m.checkpoint_type.is_savepoint)
        RETAINED.labels(job).set(len(retained) - savepoints)
        RETAINED_SAVEPOINTS.labels(job).set(savepoints)
        DISCARDED.labels(job).inc(discarded)
        sizes = {f.path: f.size_bytes for m in retained for f in state_files(m)}  # a shared file counts once
        STORED_BYTES.labels(job).set(sum(sizes.values()))
        SHARED_FILES.labels(job).set(len(store.registry.reference_counts()))
        FILES_DELETED.labels(job).inc(deleted)


def _referenced_paths(store: PersistentCheckpointStore) -> set[str]:
    """Every file the retained checkpoints and savepoints of ``store`` keep: state files and ``_metadata``."""
    return {path for m in store.store.retained()
            for path in (metadata_path(m.job_id, m.checkpoint_id, m.checkpoint_type), *(f.path for f in state_files(m)))}
