"""The changelog service's edge: bus records in; changelog topics, truncations and metrics out.

Lifecycle: the service replays the control, checkpoint-events and materializations topics from
the start into a :class:`ChangelogLedger` (``on_record``); ``on_caught_up`` creates the changelog
topics the registrations need, recomputes every partition's truncation point (the same fold gives
the same points, so nothing of the service's own needs storing), and from then on ``tick`` runs
periodically: new topics, new truncation points, metrics. ``measure`` counts changelog bytes
(when enabled). ``status`` is what ``GET /changelog`` answers.

Truncation is recorded logically first (the point below which no range needed by a retained
checkpoint or savepoint, or by a task's next checkpoints, lies) and then attempted physically
with DeleteRecords; on a broker that refuses it the point stays logical, which is logged once
per partition and counted by mode.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka.admin import AdminClient

from tidemark.changelog.changelog_topics import changelog_specs
from tidemark.changelog.truncation import ChangelogLedger, PartitionPlan, advances
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import base_config
from tidemark.kafka.metadata import partition_counts
from tidemark.kafka.topics import TopicSpec
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata, JobRegistration
from tidemark.chassis.app import ServiceApp
from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.chassis.logs import get_logger
from tidemark.services.changelog import metrics
from tidemark.services.changelog.settings import ChangelogOptions
from tidemark.services.changelog.byte_counter import ChangelogSizeReader
from tidemark.services.changelog.truncator import PhysicalTruncator
from tidemark.types import TopicPartition

log = get_logger(__name__)


class ChangelogEdge:
    def __init__(self, app: ServiceApp, options: ChangelogOptions) -> None:
        self.app = app
        self.options = options
        self.config = base_config(app.settings, app.bootstrap)
        self.ledger = ChangelogLedger(app.topics)
        self.partitions: dict[str, int] = {}  # changelog topics that exist: partition counts
        self.truncated: dict[TopicPartition, int] = {}  # logical truncation points
        self.physical: dict[TopicPartition, int] = {}  # points DeleteRecords confirmed
        self.plans: list[PartitionPlan] = []
        self.truncator = PhysicalTruncator(
            self.config, enabled=options.delete_records,
            retry_after_s=options.delete_records_retry_ms / 1000,
            timeout_s=options.delete_records_timeout_s)
        self.sizes = ChangelogSizeReader(self.config) if options.measure_bytes else None
        self._bytes_counted: dict[TopicPartition, int] = {}  # truncated bytes counted up to
        self._logged_logical: set[TopicPartition] = set()
        self._lock = asyncio.Lock()
        self.live = False

    # ------------------------------------------------------------------ input

    async def on_record(self, message: Any, raw: RawRecord, replayed: bool) -> None:
        if isinstance(message, (CheckpointMetadata, CheckpointDiscarded)) and raw.topic != self.app.topics.checkpoint_events:
            return  # on the control topic a request to the store (store, discard), not yet what it retains
        if self.ledger.apply(message) and isinstance(message, JobRegistration):
            metrics.declare(message.job_id)
            if self.live and message.changelog_operators:
                await self._ensure_topics()

    async def on_caught_up(self) -> None:
        await self._advance()  # the topics the registrations need, then the rebuilt points
        self.live = True  # only now: GET /changelog never shows a live service without its rebuilt points
        log.info("changelog service rebuilt", jobs=len(self.ledger.registrations),
                 topics=len(self.partitions), truncated_partitions=len(self.truncated))

    # ------------------------------------------------------------------ topics

    async def _ensure_topics(self) -> None:
        wanted = [spec for registration in self.ledger.registrations.values()
                  for spec in changelog_specs(registration, self.app.topics, self.options.default_partitions)]
        missing = [spec for spec in wanted if spec.name not in self.partitions]
        if not missing:
            return
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, self._create, missing)
        except Exception as exc:  # the broker may be unavailable for a moment: retried next tick
            log.warning("changelog topics not created yet", topics=[s.name for s in missing], error=str(exc))
            return
        self.partitions.update(found)
        for topic in self.ledger.topics():
            if topic.name in found:
                metrics.declare(topic.job_id, topic.operator_id)

    def _create(self, specs: list[TopicSpec]) -> dict[str, int]:
        admin = AdminClient(self.config)
        created = ensure_topics(admin, specs, self.app.settings.kafka.replication_factor)
        if created:
            log.info("changelog topics created", topics=created)
        found = partition_counts(self.config, [spec.name for spec in specs], 10)
        for spec in specs:
            if spec.name in found and found[spec.name] != spec.partitions:
                log.warning("changelog topic exists with another partition count; keeping it",
                            topic=spec.name, partitions=found[spec.name], requested=spec.partitions)
        return found

    # ------------------------------------------------------------------ truncation

    async def tick(self) -> None:
        """Create missing topics, advance truncation points, update the metrics."""
        if self.live:
            await self._advance()

    async def _advance(self) -> None:
        async with self._lock:
            await self._ensure_topics()
            # partitions first seen now are counted from where they were truncated before this
            # tick's moves, so the bytes of a first truncation are counted too (tracked after it,
            # a partition that was truncated in the tick that found it never counted them)
            self._track_sizes()
            plans = self.ledger.plan(self.partitions)  # published with the truncations it led to, below
            moves = advances(plans, self.truncated)
            behind = {tp: point for tp, point in {**self.truncated, **moves}.items()
                      if self.physical.get(tp, 0) < point}
            done = await asyncio.get_running_loop().run_in_executor(None, self.truncator.delete, behind)
            for tp in done:
                self.physical[tp] = behind[tp]
            owners = {(p.topic.name, p.partition): p.topic for p in plans}
            for tp, point in moves.items():
                self._record(tp, point, owners[tp], physical=tp in done)
            for tp in done - moves.keys():  # a logical truncation caught up physically
                if tp in owners:
                    metrics.TRUNCATIONS.labels(owners[tp].job_id, "physical").inc()
            self.plans = plans  # GET /changelog never shows new plans beside old truncation points

    def _record(self, tp: TopicPartition, point: int, owner: Any, *, physical: bool) -> None:
        before = self.truncated.get(tp, 0)
        self.truncated[tp] = point
        mode = "physical" if physical else "logical"
        metrics.TRUNCATIONS.labels(owner.job_id, mode).inc()
        metrics.TRUNCATED_RECORDS.labels(owner.job_id, owner.operator_id).inc(point - before)
        fields = {"topic": tp[0], "partition": tp[1], "before_offset": point, "mode": mode}
        if physical:
            log.info("changelog truncated", **fields)
        elif tp not in self._logged_logical:
            self._logged_logical.add(tp)
            log.warning("changelog truncated logically: records before the offset stay in the topic "
                        "(the broker did not delete them) and are never read again",
                        broker_delete_records=self.truncator.broker, **fields)
        else:
            log.debug("changelog truncated", **fields)

    # ------------------------------------------------------------------ bytes

    def _track_sizes(self) -> None:
        if self.sizes is None:
            return
        for topic, count in self.partitions.items():
            self.sizes.track(topic, count, lambda tp: self.truncated.get(tp, 0))

    async def measure(self) -> None:
        """Count newly written changelog bytes; update pending and truncated byte metrics."""
        if not self.live or self.sizes is None:
            return
        await asyncio.get_running_loop().run_in_executor(None, self.sizes.poll)
        pending: dict[tuple[str, str], int] = {}
        for plan in self.plans:
            tp, topic = TopicPartition(plan.topic.name, plan.partition), plan.topic
            truncated = self.truncated.get(tp, 0)
            counted = self._bytes_counted.setdefault(tp, self.sizes.counted_start(tp))
            reach = min(truncated, self.sizes.counted_end(tp))
            if reach > counted:  # bytes truncated since, as far as they are counted
                metrics.TRUNCATED_BYTES.labels(topic.job_id, topic.operator_id).inc(
                    self.sizes.bytes_between(tp, counted, reach))
                self.sizes.drop_before(tp, reach)
                self._bytes_counted[tp] = reach
            start = max(truncated, plan.materialized or 0)
            key = (topic.job_id, topic.operator_id)
            pending[key] = pending.get(key, 0) + self.sizes.bytes_between(tp, start)
        for (job, operator), value in pending.items():
            metrics.PENDING_BYTES.labels(job, operator).set(value)

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """What ``GET /changelog`` answers: every partition's truncation and its bounds."""
        partitions = []
        for plan in self.plans:
            tp = TopicPartition(plan.topic.name, plan.partition)
            partitions.append({
                "job": plan.topic.job_id, "operator": plan.topic.operator_id, "topic": tp[0],
                "partition": tp[1], "truncated_before": self.truncated.get(tp, 0),
                "physically_truncated_before": self.physical.get(tp, 0),
                "materialized_before": plan.materialized, "referenced_from": plan.referenced,
                "pending_bytes": (self.sizes.bytes_between(tp, max(self.truncated.get(tp, 0),
                                                                   plan.materialized or 0))
                                  if self.sizes is not None else None),
            })
        return {"live": self.live, "delete_records": self.truncator.broker, "partitions": partitions}

    def close(self) -> None:
        if self.sizes is not None:
            self.sizes.close()
