"""The job processes' view of the control plane: notifications in, registrations, acks and declines out.

A supervisor follows its job's attempt signals with :class:`AttemptSignals` (see there).


Lifecycle: ``ControlPlane(...)`` positions a consumer at the *end* of the control topic, read at
construction (so it sees every notification issued after it was made, and none of older
attempts), and of the state-queries topic (at its first fetch) ->
``poll()`` repeatedly from the worker's loop (non-blocking; returns this job's triggers,
completed and aborted notifications in log order, in changelog mode its materializations, and the
live state queries about the job, :mod:`tidemark.runtime.worker.live_state`) -> ``ack``/``decline``/``answer`` -> ``close()``.
Sending waits through a broker outage (:mod:`tidemark.kafka.outage`); polling returns nothing
during one.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from tidemark.clock import now_ms
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.metadata import watermark_offsets
from tidemark.kafka.outage import PATIENCE_S, broker_wait
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import (
    AttemptFailed,
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointTrigger,
    JobRegistration,
    MaterializationEvent,
    RestoreCommand,
    StateAnswer,
    StateQuery,
    TaskAck,
    TaskDecline,
)
from tidemark.types import CheckpointId, Epoch, JobId, TaskId

Notification = CheckpointTrigger | CheckpointCompleted | CheckpointAborted | MaterializationEvent | StateQuery


_NOTIFICATIONS = (CheckpointTrigger, CheckpointCompleted, CheckpointAborted, MaterializationEvent, StateQuery)


def job_messages(consumer: Consumer, job_id: JobId, kinds: tuple[type, ...], max_records: int) -> list[Any]:
    """The records of ``kinds`` about ``job_id`` that ``consumer`` has now (non-blocking), in log
    order; malformed records are skipped (the services dead-letter them)."""
    found = []
    for record in consumer.consume(num_messages=max_records, timeout=0):
        if record.error() is not None or record.value() is None:
            continue
        try:
            message = codec.decode(record.value())
        except DecodeError:
            continue
        if isinstance(message, kinds) and message.job_id == job_id:
            found.append(message)
    return found


class ControlPublisher:
    """Writes one job's registrations, acks and declines, each delivered before returning.
    Lifecycle: construct -> ``register``/``ack``/``decline`` -> ``close``."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId) -> None:
        self.topics = topics
        self.job_id = job_id
        self._producer = Producer(producer_config(client))
        self._wait = broker_wait(client)

    def register(self, registration: JobRegistration, *, patience_s: float = PATIENCE_S) -> None:
        self._send(self.topics.control, registration, patience_s)

    def ack(self, ack: TaskAck) -> None:
        self._send(self.topics.acks, ack)

    def decline(self, checkpoint_id: CheckpointId, task: TaskId, reason: str, epoch: Epoch) -> None:
        self._send(self.topics.acks, TaskDecline(self.job_id, checkpoint_id, task, reason, now_ms(), epoch))

    def _send(self, topic: str, message: Any, patience_s: float = PATIENCE_S) -> None:
        """Deliver ``message``, waiting through a broker outage (the producer is idempotent: a
        record retried after an outage is written once)."""
        self._wait.deliver_records(self._producer, topic, [(self.job_id.encode(), codec.encode(message))],
                                   f"send {type(message).__name__} to {topic}", patience_s=patience_s)

    def close(self) -> None:
        self._producer.flush(10)


class ControlPlane(ControlPublisher):
    """A worker's side: the publisher plus the notifications of its job (see module docstring)."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId, *,
                 materializations: bool = False) -> None:
        super().__init__(client, topics, job_id)
        self._consumer = consumer = Consumer(consumer_config(client, None))
        # the control topic's end read now, as the supervisor's AttemptSignals reads it, not left
        # to the first fetch: a trigger sent in between (the coordinator triggers a new attempt's
        # first checkpoint at its registration) would be skipped, and the checkpoint would wait
        # for this worker's ack until its timeout. The others may not exist yet (the state queries
        # topic, before the first query): their end is resolved at the first fetch, as before
        _, end = broker_wait(client).call("control topic end", lambda: watermark_offsets(
            consumer, topics.control, 0, timeout_s=30.0))
        followed = [TopicPartition(topics.control, 0, end), TopicPartition(topics.state_queries, 0, OFFSET_END)]
        if materializations:  # changelog mode: materializations of this job's tasks
            followed.append(TopicPartition(topics.materializations, 0, OFFSET_END))
        consumer.assign(followed)

    def poll(self, max_records: int = 500) -> list[Notification]:
        return job_messages(self._consumer, self.job_id, _NOTIFICATIONS, max_records)

    def answer(self, answers: list[StateAnswer]) -> None:
        """Send answers to live state queries without waiting for their delivery (an answer lost
        is a query the coordinator answers 409 after its timeout; the records wait for nothing)."""
        for message in answers:
            self._producer.produce(self.topics.state_answers, key=self.job_id.encode(), value=codec.encode(message))
        self._producer.poll(0)

    def close(self) -> None:
        self._consumer.close()
        super().close()


class AttemptSignals:
    """What the control topic tells a job's supervisor about its attempts: ``AttemptFailed``
    (the coordinator failed an attempt over for too many checkpoint failures) and
    ``RestoreCommand`` (a restore issued through the coordinator's API, by an operator or by the
    supervisor itself).

    Lifecycle: construct before the first attempt registers (it reads from the topic's end at
    that moment, so it sees every signal about this supervisor's attempts and none older; an
    adopting supervisor reads from ``from_ms``, when the adopted attempt registered) ->
    ``poll()`` repeatedly (non-blocking; returns nothing during a broker outage) -> ``close()``.
    """

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId, *,
                 from_ms: int | None = None) -> None:
        self.job_id = job_id
        self._consumer = consumer = Consumer(consumer_config(client, None))
        wait = broker_wait(client)  # a broker restarting or moving leaders (NOT_LEADER) is waited through
        _, end = wait.call("control topic end", lambda: watermark_offsets(consumer, topics.control, 0, timeout_s=30.0))
        start = end
        if from_ms:  # an adopted attempt: what was said about it while no supervisor listened
            (found,) = wait.call("control topic offset by time", lambda: consumer.offsets_for_times(
                [TopicPartition(topics.control, 0, from_ms)], timeout=30.0))
            start = found.offset if found.offset >= 0 else end
        self._consumer.assign([TopicPartition(topics.control, 0, start)])

    def poll(self, max_records: int = 500) -> list[AttemptFailed | RestoreCommand]:
        return job_messages(self._consumer, self.job_id, (AttemptFailed, RestoreCommand), max_records)

    def close(self) -> None:
        self._consumer.close()
