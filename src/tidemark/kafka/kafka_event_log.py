"""A Kafka topic as the checkpoint-store's append-only event log (``CheckpointEventLog`` port)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, Producer

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
        errors: list[str] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(str(error))

        for event in events:
            key = getattr(event, "job_id", "").encode()
            self._producer.produce(self.topic, key=key, value=codec.encode(event), partition=0,
                                   on_delivery=delivered)
        self._wait.deliver(self._producer, f"append to {self.topic}")
        if errors:
            raise KafkaException(f"event log append to {self.topic} failed: {errors}")

    def close(self) -> None:
        self._producer.flush(self._timeout)
