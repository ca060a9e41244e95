"""The materializer's edge: bus records in, materialized snapshots and their events out.

Lifecycle: the service replays the control, checkpoint-events and materializations topics from
the start into a :class:`MaterializerLedger` (``on_record``); once caught up (``on_caught_up``)
``tick`` runs periodically and materializes, one task at a time, each task whose time has come
(:class:`MaterializationSchedule`) and that has a completed checkpoint newer than its last
materialization. A materialization runs off the event loop; success publishes a COMPLETED
``MaterializationEvent`` (workers then reference the snapshot, the changelog service truncates),
failure a FAILED one, and the service stays up. Replicas live only in memory and a local working
directory: after a restart each is rebuilt from the task's newest checkpoint (its latest
materialization plus changelog) at its next materialization, so a restart loses nothing.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
from pathlib import Path
from typing import Any


from tidemark.changelog.options import ChangelogReaderOptions
from tidemark.changelog.reader import ChangelogReader
from tidemark.clock import now_ms
from tidemark.kafka.clients import base_config
from tidemark.kafka.metadata import partition_counts
from tidemark.materializer import (
    MaterializationOutcome,
    MaterializationSchedule,
    MaterializerLedger,
    TaskCheckpoint,
    TaskKey,
    TaskReplica,
    failure_event,
    materialize,
)
from tidemark.protocol.messages import CheckpointMetadata, JobRegistration
from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.chassis.logs import get_logger
from tidemark.services.materializer import metrics
from tidemark.services.materializer.settings import MaterializationSettings
from tidemark.storage.base import CheckpointStorage

log = get_logger(__name__)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class MaterializerEdge:
    def __init__(self, app: ServiceApp, settings: MaterializationSettings, storage: CheckpointStorage,
                 replica_root: Path, rng: random.Random | None = None) -> None:
        self.app = app
        self.settings = settings
        self.storage = storage
        self.config = base_config(app.settings, app.bootstrap)
        self.ledger = MaterializerLedger()
        self.schedule = MaterializationSchedule(settings.options(), rng)
        self.replica_root = replica_root
        shutil.rmtree(replica_root, ignore_errors=True)  # working copies of a previous process
        self.replicas: dict[TaskKey, TaskReplica] = {}
        self._partitions: dict[str, int] = {}
        self._running: asyncio.Future[None] | None = None
        self.live = False

    # ------------------------------------------------------------------ input

    async def on_record(self, message: Any, raw: RawRecord, replayed: bool) -> None:
        if isinstance(message, CheckpointMetadata) and raw.topic != self.app.topics.checkpoint_events:
            return  # on the control topic it is the coordinator's request to store, not yet durable
        self.ledger.apply(message)
        if isinstance(message, JobRegistration):
            metrics.declare(message.job_id)

    async def on_caught_up(self) -> None:
        self.live = True
        log.info("materializer rebuilt", jobs=len(self.ledger.registrations),
                 tasks=len(self.ledger.newest), candidates=len(self.ledger.candidates()))

    # ------------------------------------------------------------------ scheduling

    async def tick(self) -> None:
        """Start materializing the most overdue task, if any and none is running."""
        if not self.live or self._running is not None:
            return
        self._drop_stale_replicas()
        candidates = {c.key: c for c in self.ledger.candidates()}
        due = self.schedule.due(candidates, now_ms(), self._last_materialized_at)
        if due:
            self._running = asyncio.ensure_future(self._materialize(candidates[due[0]]))
            self._running.add_done_callback(self._finished)

    def _finished(self, future: asyncio.Future[None]) -> None:
        self._running = None
        if not future.cancelled() and future.exception() is not None:
            log.error("materialization task crashed", exc_info=future.exception())

    def _last_materialized_at(self, key: TaskKey) -> int | None:
        last = self.ledger.materialized.get(key)
        return None if last is None else last.at

    def _drop_stale_replicas(self) -> None:
        """Close the replicas of tasks that a newer registration of their job no longer lists."""
        current = self.ledger.tasks_of_current_attempts()
        registered = self.ledger.registrations
        for key in [k for k in self.replicas if k[0] in registered and k not in current]:
            self.replicas.pop(key).close()
            self.schedule.forget(key)

    # ------------------------------------------------------------------ one materialization

    async def _materialize(self, target: TaskCheckpoint) -> None:
        key, loop = target.key, asyncio.get_running_loop()
        materialization_id = self.ledger.next_materialization_id(key, now_ms())
        replica = self.replicas.get(key)
        if replica is None:
            folder = self.replica_root / _UNSAFE.sub("_", target.job_id) / _UNSAFE.sub("_", target.task.task_id)
            replica = self.replicas[key] = TaskReplica(folder, self.settings.replica_options())
        try:
            reader = await loop.run_in_executor(None, self._reader, target)
            outcome: MaterializationOutcome = await loop.run_in_executor(
                None, materialize, target, replica, self.storage, reader, materialization_id, now_ms())
            await self.app.publish(self.app.topics.materializations, outcome.event, target.job_id.encode())
        except Exception as exc:
            await self._failed(target, materialization_id, exc)
            return
        replica.produced(materialization_id)
        self.ledger.apply(outcome.event)
        self.schedule.succeeded(key, now_ms())
        job = target.job_id
        metrics.MATERIALIZATIONS.labels(job, "completed").inc()
        metrics.DURATION.labels(job).observe(outcome.duration_s)
        metrics.UPLOAD.labels(job).observe(outcome.upload_s)
        metrics.LAST_SIZE.labels(job).set(outcome.full_size_bytes)
        metrics.LAST_INCREMENTAL_SIZE.labels(job).set(outcome.incremental_size_bytes)
        log.info("materialized", job=job, task=target.task.task_id, checkpoint=target.checkpoint_id,
                 materialization=materialization_id, fold=outcome.fold, applied=outcome.read.applied,
                 full_bytes=outcome.full_size_bytes, new_bytes=outcome.incremental_size_bytes,
                 duration_s=round(outcome.duration_s, 3))

    def _reader(self, target: TaskCheckpoint) -> ChangelogReader:
        topic = target.topic
        assert topic is not None, "candidates have changelog ranges"
        if topic not in self._partitions:
            found = partition_counts(self.config, [topic], 10)
            if topic not in found:
                raise RuntimeError(f"changelog topic {topic} does not exist")
            self._partitions[topic] = found[topic]
        return ChangelogReader(self.config, partitions=self._partitions[topic],
                               max_parallelism=target.max_parallelism,
                               options=ChangelogReaderOptions(idle_timeout_s=self.settings.read_idle_timeout_s))

    async def _failed(self, target: TaskCheckpoint, materialization_id: int, error: Exception) -> None:
        key, job = target.key, target.job_id
        exhausted = self.schedule.failed(key, now_ms())
        metrics.MATERIALIZATIONS.labels(job, "failed").inc()
        fields = {"job": job, "task": target.task.task_id, "checkpoint": target.checkpoint_id,
                  "failures": self.schedule.failures(key), "error": f"{type(error).__name__}: {error}"}
        if exhausted:
            log.error("materialization failed; failure budget spent, backing off", exc_info=error,
                      next_attempt_in_s=round(((self.schedule.next_due(key) or 0) - now_ms()) / 1000, 1),
                      **fields)
        else:
            log.warning("materialization failed; retrying at the next interval", **fields)
        try:
            await self.app.publish(self.app.topics.materializations,
                                   failure_event(target, materialization_id, now_ms(), error), job.encode())
        except Exception as exc:  # the bus is down too: the log line above is the report
            log.warning("could not publish the failed materialization", error=str(exc), **fields)

    def close(self) -> None:
        for replica in self.replicas.values():
            replica.close()
        self.replicas.clear()
