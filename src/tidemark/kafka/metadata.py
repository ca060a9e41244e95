"""Topic metadata asked for by name.

A Metadata request naming a topic is cheap on a cluster of any size, where one listing every
topic is not (the source plans a batch with it, the outage watch probes every 2 s). Naming a topic
never creates it here: librdkafka consumers send ``allow_auto_topic_creation=false`` (their
``allow.auto.create.topics`` default), so only consumers ask. (Tansu once created topics on such
requests; Apache Kafka does so only for clients that allow it, with ``auto.create.topics.enable``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer

from tidemark.kafka.clients import consumer_config

# a topic every Kafka cluster with consumer groups has; a probe needs any name, not the topic
PROBE_TOPIC = "__consumer_offsets"


def topic_partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    """The partitions of ``topic``, sorted; ``[]`` when the broker does not know it (yet)."""
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return []
    return sorted(meta.partitions)


def brokers_listed(consumer: Consumer, timeout_s: float) -> int:
    """How many brokers a Metadata request names (raises KafkaException when none answers)."""
    return len(consumer.list_topics(PROBE_TOPIC, timeout=timeout_s).brokers)


def partition_counts(client: Mapping[str, Any], topics: Iterable[str], timeout_s: float) -> dict[str, int]:
    """Partition count of each of ``topics`` the broker knows (missing ones are left out), asked
    with a short-lived metadata consumer built from ``client``'s connection settings."""
    consumer = Consumer(consumer_config(dict(client), None))
    try:
        return {topic: len(found) for topic in topics if (found := topic_partitions(consumer, topic, timeout_s))}
    finally:
        consumer.close()
