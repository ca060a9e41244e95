"""A worker's view of the control plane: notifications in, acks and declines out.

Lifecycle: ``ControlPlane(...)`` positions a consumer at the *end* of the control topic (so it
sees every notification issued after the worker started, and none of older attempts) ->
``poll()`` repeatedly from the worker's loop (non-blocking; returns this job's triggers,
completed and aborted notifications in log order, and in changelog mode its materializations) -> ``ack``/``decline`` -> ``close()``.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointTrigger,
    JobRegistration,
    MaterializationEvent,
    TaskAck,
    TaskDecline,
)
from tidemark.types import CheckpointId, Epoch, JobId, TaskId

Notification = CheckpointTrigger | CheckpointCompleted | CheckpointAborted | MaterializationEvent


def now_ms() -> int:
    return int(time.time() * 1000)


class ControlPublisher:
    """Writes one job's registrations, acks and declines, each delivered before returning.
    Lifecycle: construct -> ``register``/``ack``/``decline`` -> ``close``."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId) -> None:
        self.topics = topics
        self.job_id = job_id
        self._producer = Producer(producer_config(client))

    def register(self, registration: JobRegistration) -> None:
        self._send(self.topics.control, registration)

    def ack(self, ack: TaskAck) -> None:
        self._send(self.topics.acks, ack)

    def decline(self, checkpoint_id: CheckpointId, task: TaskId, reason: str, epoch: Epoch) -> None:
        self._send(self.topics.acks, TaskDecline(self.job_id, checkpoint_id, task, reason, now_ms(), epoch))

    def _send(self, topic: str, message: Any) -> None:
        self._producer.produce(topic, key=self.job_id.encode(), value=codec.encode(message))
        if self._producer.flush(30) != 0:
            raise RuntimeError(f"{type(message).__name__} to {topic} not delivered within 30s")

    def close(self) -> None:
        self._producer.flush(10)


class ControlPlane(ControlPublisher):
    """A worker's side: the publisher plus the notifications of its job (see module docstring)."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId, *,
                 materializations: bool = False) -> None:
        super().__init__(client, topics, job_id)
        self._consumer = Consumer(consumer_config(client, None))
        followed = [TopicPartition(topics.control, 0, OFFSET_END)]
        if materializations:  # changelog mode: materializations of this job's tasks
            followed.append(TopicPartition(topics.materializations, 0, OFFSET_END))
        self._consumer.assign(followed)

    def poll(self, max_records: int = 500) -> list[Notification]:
        found: list[Notification] = []
        for record in self._consumer.consume(num_messages=max_records, timeout=0):
            if record.error() is not None or record.value() is None:
                continue
            try:
                message = codec.decode(record.value())
            except DecodeError:
                continue  # the services dead-letter malformed control records; workers skip them
            if isinstance(message, (CheckpointTrigger, CheckpointCompleted, CheckpointAborted,
                                    MaterializationEvent)) and message.job_id == self.job_id:
                found.append(message)
        return found

    def close(self) -> None:
        self._consumer.close()
        super().close()
