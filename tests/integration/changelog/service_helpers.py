"""Helpers for the changelog and materializer service tests: publishing bus records, reading a
service's status and metrics, and changelog tasks that take part in checkpoints."""

from __future__ import annotations

import json
import re
import time
from typing import Any, TypeVar

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidemark.kafka.clients import producer_config
from tidemark.local.cluster import LocalService
from tidemark.protocol import codec
from protocol_builders import (
    MAX_PARALLELISM,
    checkpoint_discarded,
    checkpoint_metadata,
    job_registration,
    materialization,
    task_assignments,
)
from tidemark.protocol.messages import (
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.state import KeyGroupRange
from tidemark.types import CheckpointType, JobId, OperatorId

T = TypeVar("T")
MAX_P = MAX_PARALLELISM
OPERATOR = OperatorId("counts")


def assignments(parallelism: int) -> tuple[TaskAssignment, ...]:
    return task_assignments(OPERATOR, parallelism)


def key_groups(assignment: TaskAssignment) -> KeyGroupRange:
    return KeyGroupRange(assignment.key_group_start, assignment.key_group_end)


def registration(job: JobId, tasks: tuple[TaskAssignment, ...], partitions: int, epoch: int = 1) -> JobRegistration:
    return job_registration(job, tasks, epoch=epoch, changelog_partitions=partitions,
                            source_tasks=(t.task_id for t in tasks), at=_now_ms())


def metadata(job: JobId, checkpoint_id: int, tasks: list[TaskSnapshot], *, epoch: int = 1,
             kind: CheckpointType = CheckpointType.CHECKPOINT) -> CheckpointMetadata:
    return checkpoint_metadata(job, checkpoint_id, tasks, epoch=epoch, kind=kind, at=_now_ms())


def discarded(job: JobId, checkpoint_id: int) -> CheckpointDiscarded:
    return checkpoint_discarded(job, checkpoint_id, at=_now_ms())


def materialized(job: JobId, snapshot: TaskSnapshot, checkpoint_id: int, materialization_id: int) -> MaterializationEvent:
    """A COMPLETED materialization of ``snapshot`` (no files: the changelog service needs none)."""
    return materialization(job, snapshot.task_id, snapshot.operator_id, checkpoint_id, materialization_id,
                           snapshot.changelog_ranges, at=_now_ms())


def _now_ms() -> int:
    return int(time.time() * 1000)


class Bus:
    """Publishes protocol records, as workers and the other services do."""

    def __init__(self, bootstrap: str) -> None:
        self.client = {"bootstrap.servers": bootstrap}
        self.producer = Producer(producer_config(self.client))

    def send(self, topic: str, *messages: Any) -> None:
        for message in messages:
            key = getattr(message, "job_id", "").encode()
            self.producer.produce(topic, key=key, value=codec.encode(message), partition=0)
        assert self.producer.flush(10) == 0

    def partitions(self, topic: str) -> int:
        found = AdminClient(self.client).list_topics(timeout=5).topics.get(topic)  # never auto-creates
        return 0 if found is None or found.error is not None else len(found.partitions)


def changelog_status(service: LocalService) -> dict[str, Any]:
    code, body = service.get("/changelog")
    assert code == 200, body
    return json.loads(body)


def truncation_points(service: LocalService) -> dict[int, int]:
    return {p["partition"]: p["truncated_before"] for p in changelog_status(service)["partitions"]}


def metric(service: LocalService, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent)."""
    text = service.get("/metrics")[1].decode()
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{name}(\{{[^}}]*\}})? (\S+)$", line)
        if match is None:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total
