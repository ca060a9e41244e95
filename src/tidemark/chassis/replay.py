"""Event-sourced input: replay a service's topics from the beginning, then follow them live.

A service whose state is a fold of records (the coordinator, the checkpoint-store) must read every
record again after a restart before it decides anything. :class:`EventLogReader` does that with
an ``assign()``-mode consumer (exact offsets, no group, read_committed):

Lifecycle: ``EventLogReader(config, topics)`` -> ``open()`` (assigns every partition from its
first offset and records the end offsets as the replay boundary) -> ``poll()`` repeatedly; each returned
:class:`LogRecord` says whether it is ``replayed`` (before the boundary) or live; ``caught_up``
turns True once every partition's position reached its boundary -> ``close()``.

With ``confirm_delivery`` the reader also asks the broker for the partitions' end offsets about
once a second once caught up, and sets ``delivered_at_ms`` (wall clock) whenever it has read
everything the previous answer said was there: evidence that it is receiving, which a service
needs before it takes silence on its topics for a fact (:mod:`tidemark.checkpoint.liveness`).
During a broker outage the answers stop, and so do the confirmations. It asks through a client of
its own: the broker answers a connection's requests in order, so on the reading consumer's
connection each question would wait behind the fetch in flight (up to ``fetch.wait.max.ms``,
half a second, per partition), and the records read after it with it.

Boundary caveat: the embedded broker reports a short end offset after non-transactional batched
produce (notes/embedded-broker.md). Records past a short boundary then arrive as live records;
every consumer of this reader is idempotent per record (acks, triggers and store requests are),
so this delays nothing and duplicates no effect.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition as KafkaTopicPartition

from tidemark.clock import now_ms

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import topic_partitions, watermark_offsets
from tidemark.kafka.outage import broker_wait, unavailable
from tidemark.chassis.dead_letter_publisher import RawRecord, headers_of
from tidemark.types import TopicPartition


CONFIRM_EVERY_S = 1.0
CONFIRM_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class LogRecord:
    raw: RawRecord
    replayed: bool


class EventLogReader:
    """Reads ``topics`` from their beginning to their end, then keeps following them."""

    def __init__(self, config: dict[str, Any], topics: list[str], *, metadata_timeout_s: float = 15.0,
                 confirm_delivery: bool = False) -> None:
        self._config = consumer_config(config, None)
        self._wait = broker_wait(config)
        self.topics = list(topics)
        self._timeout = metadata_timeout_s
        self._consumer: Consumer | None = None
        self._ends_client: Consumer | None = None  # confirm_delivery only: asks for end offsets, never fetches
        self._boundary: dict[TopicPartition, int] = {}
        self._position: dict[TopicPartition, int] = {}
        self._confirm = confirm_delivery
        self._next_confirm = 0.0
        self._ends_asked: dict[TopicPartition, int] | None = None
        self.delivered_at_ms: int | None = None  # see the module docstring (confirm_delivery)

    def open(self) -> None:
        consumer = Consumer(self._config)
        partitions = []
        for topic in self.topics:
            numbers = topic_partitions(consumer, topic, self._timeout)
            if not numbers:
                consumer.close()
                raise RuntimeError(f"topic {topic} does not exist")
            for partition in numbers:
                low, high = self._wait.call(  # a topic created a moment ago may have no leader yet
                    f"read {topic}", lambda partition=partition: watermark_offsets(consumer, topic, partition,
                                                                                   timeout_s=self._timeout))
                self._boundary[TopicPartition(topic, partition)] = high
                self._position[TopicPartition(topic, partition)] = low
                partitions.append(KafkaTopicPartition(topic, partition, low))  # not OFFSET_BEGINNING: a 0.5 s lookup
        consumer.assign(partitions)
        self._consumer = consumer
        if self._confirm:
            self._ends_client = Consumer(self._config)

    @property
    def caught_up(self) -> bool:
        """True once opened and every partition's position reached its replay boundary."""
        return self._consumer is not None and all(self._position[tp] >= end for tp, end in self._boundary.items())

    def poll(self, max_records: int = 500, timeout_s: float = 0.2) -> list[LogRecord]:
        """Up to ``max_records`` records, returned as soon as one is there (waiting at most
        ``timeout_s`` for it) with those already fetched behind it; fetch errors other than
        end-of-partition or a broker outage (nothing is returned until it ends) raise."""
        assert self._consumer is not None, "open() first"
        if self._confirm and self.caught_up and time.monotonic() >= self._next_confirm:
            self._confirm_delivery()
        records = []
        for message in self._fetched(max_records, timeout_s):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                if unavailable(error):  # librdkafka fetches again once the broker is back
                    self._wait.failed(f"read {', '.join(self.topics)}", error)
                    continue
                raise RuntimeError(f"fetch failed: {error}")
            # per record: the plain tuple, equal to its TopicPartition (see types.TopicPartition)
            tp = (message.topic(), message.partition())
            replayed = message.offset() < self._boundary.get(tp, 0)
            self._position[tp] = message.offset() + 1
            timestamp = message.timestamp()[1]
            records.append(LogRecord(RawRecord(
                topic=message.topic(), partition=message.partition(), offset=message.offset(),
                timestamp=timestamp if timestamp >= 0 else None, key=message.key(),
                value=message.value(), headers=headers_of(message.headers())), replayed))
        if not records:  # positions may move past control markers without returning records
            self._refresh_positions()
        return records

    def _fetched(self, max_records: int, timeout_s: float) -> list[Message]:
        """The first message within ``timeout_s`` and those queued behind it (``consume`` alone
        would wait out its whole timeout for fewer than ``max_records``: a live record late by up
        to ``timeout_s``)."""
        assert self._consumer is not None
        first = self._consumer.poll(timeout_s)
        if first is None:
            return []
        return [first, *self._consumer.consume(max_records - 1, 0)] if max_records > 1 else [first]

    def _confirm_delivery(self) -> None:
        """Ask for the end offsets; confirm when everything the previous answer listed was read."""
        assert self._ends_client is not None
        self._next_confirm = time.monotonic() + CONFIRM_EVERY_S
        try:
            ends = {tp: self._ends_client.get_watermark_offsets(KafkaTopicPartition(*tp), timeout=CONFIRM_TIMEOUT_S,
                                                             cached=False)[1] for tp in self._boundary}
        except KafkaException:  # no answer is no confirmation: a restarting broker first says 'unknown
            return              # partition' or tears the connection down, and none of it is the reader's failure
        if self._ends_asked is not None and all(self._position[tp] >= end for tp, end in self._ends_asked.items()):
            self.delivered_at_ms = now_ms()
        self._ends_asked = ends

    def _refresh_positions(self) -> None:
        assert self._consumer is not None
        for tp in self._consumer.position([KafkaTopicPartition(t, p) for t, p in self._boundary]):
            if tp.offset >= 0:
                key = TopicPartition(tp.topic, tp.partition)
                self._position[key] = max(self._position[key], tp.offset)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._ends_client is not None:
            self._ends_client.close()
            self._ends_client = None
