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
from tidemark.protocol.messages import (
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.state import KeyGroupRange
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    KeyGroup,
    MaterializationId,
    OperatorId,
    task_id,
)

T = TypeVar("T")
MAX_P = 128
OPERATOR = OperatorId("counts")


def assignments(parallelism: int) -> tuple[TaskAssignment, ...]:
    size = MAX_P // parallelism
    return tuple(TaskAssignment(task_id(OPERATOR, i), OPERATOR, i, KeyGroup(i * size),
                                KeyGroup(MAX_P - 1 if i == parallelism - 1 else (i + 1) * size - 1))
                 for i in range(parallelism))


def key_groups(assignment: TaskAssignment) -> KeyGroupRange:
    return KeyGroupRange(assignment.key_group_start, assignment.key_group_end)


def registration(job: JobId, tasks: tuple[TaskAssignment, ...], partitions: int, epoch: int = 1) -> JobRegistration:
    return JobRegistration(job, Epoch(epoch), CheckpointingMode.EXACTLY_ONCE, MAX_P, tasks,
                           tuple(t.task_id for t in tasks), int(time.time() * 1000),
                           changelog_operators=(OPERATOR,), changelog_partitions=partitions)


def metadata(job: JobId, checkpoint_id: int, tasks: list[TaskSnapshot], *, epoch: int = 1,
             kind: CheckpointType = CheckpointType.CHECKPOINT) -> CheckpointMetadata:
    now = int(time.time() * 1000)
    return CheckpointMetadata(job, CheckpointId(checkpoint_id), kind, now, now, MAX_P, tuple(tasks), Epoch(epoch))


def discarded(job: JobId, checkpoint_id: int) -> CheckpointDiscarded:
    return CheckpointDiscarded(job, CheckpointId(checkpoint_id), int(time.time() * 1000), "retention")


def materialized(job: JobId, snapshot: TaskSnapshot, checkpoint_id: int, materialization_id: int) -> MaterializationEvent:
    """A COMPLETED materialization of ``snapshot`` (no files: the changelog service needs none)."""
    return MaterializationEvent(job, snapshot.task_id, snapshot.operator_id, MaterializationId(materialization_id),
                                MaterializationStatus.COMPLETED, CheckpointId(checkpoint_id),
                                snapshot.changelog_ranges, (), int(time.time() * 1000))


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
