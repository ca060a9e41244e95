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

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition as KafkaTopicPartition

from tidemark.kafka.clients import consumer_config
from tidemark.types import TopicPartition

# a topic every Kafka cluster with consumer groups has; a probe needs any name, not the topic
PROBE_TOPIC = "__consumer_offsets"


class TopicNotFoundError(LookupError):
    """A subscribed topic does not exist on the broker."""


def metadata_consumer(client: Mapping[str, Any], isolation_level: str = "read_committed") -> Consumer:
    """An assign()-only consumer for metadata and watermark queries (no group is joined)."""
    return Consumer(consumer_config(dict(client), None, **{"isolation.level": isolation_level}))


def list_partitions(consumer: Consumer, topics: Iterable[str], timeout_s: float = 10.0) -> list[TopicPartition]:
    """Every (topic, partition) of ``topics``; raises TopicNotFoundError naming missing ones."""
    found: list[TopicPartition] = []
    missing: list[str] = []
    for topic in topics:
        partitions = topic_partitions(consumer, topic, timeout_s)
        if not partitions:
            missing.append(topic)
        found.extend(TopicPartition(topic, partition) for partition in partitions)
    if missing:
        raise TopicNotFoundError(f"tidemark-kafka option 'subscribe': topic(s) not found: {missing}")
    return found


_UNKNOWN = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})


def watermark_offsets(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """(low, high) of one partition from the broker. A partition the client's metadata does not
    have (librdkafka's ``_UNKNOWN_PARTITION``: a new client, or a topic created a moment ago) has
    its topic's metadata asked for by name before the error is raised, so that a retry
    (:meth:`tidemark.kafka.outage.BrokerWait.call`) finds it: a new consumer's cache does not
    always fetch it by itself (a worker once got the error for 20 s on a topic that long existed)."""
    try:
        return consumer.get_watermark_offsets(KafkaTopicPartition(topic, partition), timeout=timeout_s, cached=False)
    except KafkaException as exc:
        if exc.args[0].code() in _UNKNOWN:
            try:
                consumer.list_topics(topic, timeout=timeout_s)
            except KafkaException:
                pass  # the error raised below says what failed
        raise


def watermarks(
    consumer: Consumer, partitions: Iterable[TopicPartition], timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(low, high) per partition from the broker; high is the LSO under read_committed."""
    result = {}
    for topic, partition in partitions:
        try:
            low, high = watermark_offsets(consumer, topic, partition, timeout_s)
        except KafkaException as exc:  # name the partition; keep the code (an outage stays recognisable)
            error = exc.args[0]
            raise KafkaException(KafkaError(error.code(), f"watermarks of {topic}/{partition}: {error.str()}",
                                            retriable=error.retriable())) from exc
        result[TopicPartition(topic, partition)] = (low, high)
    return result


def records_in(client: Mapping[str, Any], topic: str, partitions: Iterable[int] | None = None) -> int:
    """How many records ``topic`` holds (every partition's, or ``partitions``'): end minus start
    offsets under read_committed, so up to the last committed record; transaction markers count too."""
    consumer = metadata_consumer(client)
    try:
        keys = list_partitions(consumer, [topic]) if partitions is None else [TopicPartition(topic, p) for p in partitions]
        return sum(high - low for low, high in watermarks(consumer, keys).values())
    finally:
        consumer.close()


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
