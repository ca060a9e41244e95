"""Counting the bytes of changelog records, for the pending and truncated byte metrics.

Kafka cannot tell the bytes between two offsets, so the service reads the changelogs itself,
keeping per partition only block sums (:class:`~tidemark.changelog.offset_sizes.PartitionSizes`).

Lifecycle: ``ChangelogSizeReader(config)`` -> ``track(topic, partitions, start_of)`` for every
changelog topic, from where it is truncated -> ``poll()`` repeatedly (blocking: run it off the
event loop, never two at once) -> ``bytes_between`` / ``drop_before`` at any time (thread-safe)
-> ``close()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition as KafkaTopicPartition

from tidemark.changelog.offset_sizes import PartitionSizes
from tidemark.kafka.clients import consumer_config
from tidemark.kafka.outage import broker_wait, unavailable
from tidemark.types import TopicPartition


class ChangelogSizeReader:
    """Assign-mode reader of changelog topics that only counts record bytes."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._consumer = Consumer(consumer_config(config, None, **{
            "isolation.level": "read_uncommitted", "auto.offset.reset": "earliest"}))
        self._wait = broker_wait(config)
        self._lock = threading.Lock()
        self._sizes: dict[TopicPartition, PartitionSizes] = {}
        self._to_assign: list[KafkaTopicPartition] = []

    def track(self, topic: str, partitions: int, start_of: Callable[[TopicPartition], int]) -> None:
        """Start counting the partitions of ``topic`` not counted yet, each from ``start_of``."""
        with self._lock:
            for partition in range(partitions):
                tp = TopicPartition(topic, partition)
                if tp not in self._sizes:
                    start = start_of(tp)
                    self._sizes[tp] = PartitionSizes(start)
                    self._to_assign.append(KafkaTopicPartition(topic, partition, start))

    def poll(self, max_records: int = 5000, timeout_s: float = 0.2) -> int:
        """Read and count up to ``max_records`` records; how many were counted."""
        with self._lock:
            assign, self._to_assign = self._to_assign, []
        if assign:
            self._consumer.incremental_assign(assign)
        messages = self._consumer.consume(max_records, timeout_s) if self._sizes else []
        counted = 0
        with self._lock:
            for message in messages:
                error = message.error()
                if error is not None:
                    if unavailable(error):
                        self._wait.failed("count changelog bytes", error)
                    elif error.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"changelog size reader: {error}")
                    continue
                # per record: the plain tuple, equal to its TopicPartition (see types.TopicPartition)
                sizes = self._sizes.get((message.topic(), message.partition()))  # type: ignore[call-overload]
                if sizes is not None:
                    sizes.add(message.offset(), len(message.value() or b"") + len(message.key() or b""))
                    counted += 1
        return counted

    def bytes_between(self, tp: TopicPartition, low: int, high: int | None = None) -> int:
        """Bytes of the records of ``tp`` in ``[low, high)`` (``None``: up to the last counted)."""
        with self._lock:
            sizes = self._sizes.get(tp)
            if sizes is None:
                return 0
            return sizes.bytes_between(low, sizes.end if high is None else high)

    def counted_start(self, tp: TopicPartition) -> int:
        """Where counting of ``tp`` started (or was dropped to)."""
        with self._lock:
            sizes = self._sizes.get(tp)
            return 0 if sizes is None else sizes.start

    def counted_end(self, tp: TopicPartition) -> int:
        with self._lock:
            sizes = self._sizes.get(tp)
            return 0 if sizes is None else sizes.end

    def drop_before(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            sizes = self._sizes.get(tp)
            if sizes is not None:
                sizes.drop_before(offset)

    def close(self) -> None:
        self._consumer.close()
