"""Kafka helpers for tests against a real broker: topics, transactional producers and committed reads."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec

Record = tuple[int, bytes | None, bytes, list[tuple[str, bytes]] | None]  # partition, key, value, headers


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(topic, partitions)])


def produce_transaction(bootstrap: str, topic: str, records: Iterable[Record], *, commit: bool = True,
                        producer: Producer | None = None) -> None:
    """Write ``records`` in one transaction, flushed to the broker, then commit or abort it."""
    own = producer is None
    if producer is None:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"test-{uuid.uuid4().hex}",
                             "linger.ms": 5})
        producer.init_transactions(10)
    producer.begin_transaction()
    for partition, key, value, headers in records:
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
    producer.flush(10)  # the records reach the broker even when the transaction is aborted
    if commit:
        producer.commit_transaction(10)
    else:
        producer.abort_transaction(10)
    if own:
        producer.flush(1)


def committed_values(bootstrap: str, topic: str, partitions: int, *, timeout_s: float = 10.0) -> list[bytes]:
    """Every value a read_committed consumer sees in ``topic`` up to its current end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)[1]
                for p in range(partitions)}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        values: list[bytes] = []
        for _ in range(int(timeout_s / 0.2)):
            if not pending:
                break
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is None:
                    values.append(message.value())
                elif error.code() == KafkaError._PARTITION_EOF and message.offset() >= ends[message.partition()]:
                    pending.discard(message.partition())
        assert not pending, f"could not read {topic} to its end: {pending}"
        return values
    finally:
        consumer.close()
