"""Shared fixtures of the contract suites that run against the session broker: a client config,
fresh topics, and real consumers reading a topic back with a chosen isolation level."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec


@dataclass(frozen=True, slots=True)
class ReadRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]


@pytest.fixture
def client(kafka_bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def new_topic(client: dict[str, Any], unique_name: Callable[[str], str]) -> Callable[[str, int], str]:
    """``new_topic("out", partitions)`` -> the name of a topic just created."""

    def make(base: str, partitions: int = 1) -> str:
        topic = unique_name(base)
        ensure_topics(AdminClient(client), [TopicSpec(topic, partitions)])
        return topic

    return make


@pytest.fixture
def read_topic(client: dict[str, Any]) -> Callable[..., list[ReadRecord]]:
    """``read_topic(topic, isolation, expected)``: every record of ``topic`` from offset 0 as a
    consumer with ``isolation.level`` = ``isolation`` sees it, ordered by (partition, offset).
    Waits (bounded) for ``expected`` records, then a moment longer so that an extra one shows."""

    def read(topic: str, isolation: str, expected: int) -> list[ReadRecord]:
        consumer = Consumer({**client, "group.id": f"contract-{uuid.uuid4().hex[:8]}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "enable.partition.eof": False})
        try:
            partitions = consumer.list_topics(topic, timeout=10.0).topics[topic].partitions
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
            records: list[ReadRecord] = []
            deadline = time.monotonic() + 20.0
            quiet_until: float | None = None
            while time.monotonic() < deadline:
                for message in consumer.consume(500, 0.2):
                    if message.error() is not None:
                        raise AssertionError(f"fetch error: {message.error()}")
                    records.append(ReadRecord(message.partition(), message.offset(), message.key(),
                                              message.value(), dict(message.headers() or [])))
                if len(records) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 0.5
                    if time.monotonic() >= quiet_until:
                        break
            return sorted(records, key=lambda r: (r.partition, r.offset))
        finally:
            consumer.close()

    return read


@pytest.fixture
def end_offsets(client: dict[str, Any]) -> Callable[[str], int]:
    """``end_offsets(topic)``: the sum of the high watermarks, i.e. how many records (data and
    transaction markers, committed or not) reached the broker."""

    def total(topic: str) -> int:
        # read_uncommitted: a read_committed consumer's high watermark is the last stable offset
        consumer = Consumer({**client, "group.id": "contract-watermarks", "isolation.level": "read_uncommitted"})
        try:
            partitions = consumer.list_topics(topic, timeout=10.0).topics[topic].partitions
            return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10.0, cached=False)[1]
                       for p in partitions)
        finally:
            consumer.close()

    return total
