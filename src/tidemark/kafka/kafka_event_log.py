"""A Kafka topic as the checkpoint-store's append-only event log (``CheckpointEventLog`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import Producer

from tidemark.kafka.clients import producer_config
from tidemark.kafka.outage import broker_wait
from tidemark.protocol import codec


class KafkaEventLog:
    """Appends encoded events to one single-partition topic, in order, durably.

    Lifecycle: construct, ``append`` any number of times (blocking until every event is
    acknowledged by the broker with acks=all, also through a broker outage), ``close`` to flush.
    Not thread-safe; one writer.
    """

    def __init__(self, base: dict[str, Any], topic: str, *, timeout_s: float = 30.0) -> None:
        self.topic = topic
        self._timeout = timeout_s
        self._producer = Producer(producer_config(base, **{"max.in.flight.requests.per.connection": 1}))
        self._wait = broker_wait(base)

    def append(self, events: Sequence[Any]) -> None:
        self._wait.deliver_records(self._producer, self.topic,
                                   [(getattr(event, "job_id", "").encode(), codec.encode(event)) for event in events],
                                   f"append to {self.topic}", partition=0)

    def close(self) -> None:
        self._producer.flush(self._timeout)
