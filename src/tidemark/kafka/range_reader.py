"""Read one offset range ``[start, end)`` of one Kafka partition, as chunks of consumed messages.

The one range-reading loop: the Spark source turns the chunks into Arrow record batches
(:mod:`tidemark.spark.arrow_range_reader`) and the commit-marker lookup scans them
(:mod:`tidemark.kafka.commit_markers`). Contract of :func:`read_messages`:

- yields exactly the records with ``start <= offset < end`` that the isolation level lets the
  consumer see, in offset order, as non-empty lists of at most ``max_messages``
  confluent-kafka ``Message``s (one list per consume call);
- stops as soon as the consumer position reaches ``end`` (transaction markers and filtered
  records occupy offsets, so the number of records is not the number of offsets);
- an empty range returns at once, without contacting the broker;
- if the position stops short of ``end`` for ``idle_timeout_s`` (records deleted under the
  range are skipped by the position, so this means the broker cannot serve the range), it
  raises :class:`RangeNotReachedError` instead of returning a silently shorter result; while
  it waits it logs a warning every ``_STALL_WARNING_S`` (an open transaction under the range
  holds a read_committed position back until it ends);
- while the broker is unreachable it waits (:mod:`tidemark.kafka.outage`): fetch errors of an outage
  are not failures, and the idle timeout counts only time in which the broker answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import brokers_listed
from tidemark.kafka.outage import PROBE_TIMEOUT_S, BrokerWait, broker_wait, unavailable

_POLL_S = 0.2
_STALL_WARNING_S = 10.0

log = logging.getLogger(__name__)


class RangeNotReachedError(RuntimeError):
    """The consumer could not reach the planned end of a range within the idle timeout."""


def range_consumer(client: Mapping[str, Any], isolation_level: str = "read_committed") -> Consumer:
    """An assign()-mode consumer (no group) that reports partition EOF."""
    return Consumer(consumer_config(dict(client), None, **{"enable.partition.eof": True,
                                                            "isolation.level": isolation_level}))


def read_messages(
    client: Mapping[str, Any],
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    isolation_level: str = "read_committed",
    max_messages: int = 10_000,
    idle_timeout_s: float = 30.0,
) -> Iterator[list[Message]]:
    """Yield the records of ``topic/partition`` in ``[start, end)`` (see the module contract)."""
    if end <= start:
        return
    consumer = range_consumer(client, isolation_level)
    try:
        yield from _consume(consumer, topic, partition, start, end, max_messages, idle_timeout_s,
                            broker_wait(client))
    finally:
        consumer.close()


def _consume(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, max_messages: int,
    idle_timeout_s: float, wait: BrokerWait,
) -> Iterator[list[Message]]:
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = last_warning = time.monotonic()
    while position < end:
        messages = consumer.consume(num_messages=max_messages, timeout=_POLL_S)
        before = position
        chunk: list[Message] = []
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
                elif unavailable(error):  # librdkafka keeps fetching once the broker is back
                    wait.failed(f"read {topic}/{partition}", error)
                else:
                    raise KafkaException(error)
                continue
            if message.offset() >= end:
                position = end
                break
            chunk.append(message)
            position = max(position, message.offset() + 1)
        if position < end:
            reported = consumer.position([TopicPartition(topic, partition)])[0].offset
            position = max(position, reported)
        if chunk:
            yield chunk
        now = time.monotonic()
        if position > before:
            last_progress = last_warning = now
            if wait.waiting:
                wait.succeeded()
        elif now - last_progress > idle_timeout_s and not _broker_answers(consumer, wait, topic, partition):
            last_progress = last_warning = now  # an outage: the idle timeout starts again
        elif now - last_progress > idle_timeout_s:
            raise RangeNotReachedError(
                f"{topic}/{partition}: position {position} did not reach the planned end {end} "
                f"(range start {start}) within {idle_timeout_s}s"
            )
        elif now - last_warning >= _STALL_WARNING_S:
            last_warning = now
            log.warning("%s/%s: position %s short of the planned end %s for %.0fs (timeout %gs)",
                        topic, partition, position, end, now - last_progress, idle_timeout_s)


def _broker_answers(consumer: Consumer, wait: BrokerWait, topic: str, partition: int) -> bool:
    """Whether the broker answers a Metadata request now (an unanswered one is an outage)."""
    try:
        brokers_listed(consumer, PROBE_TIMEOUT_S)
    except KafkaException as exc:
        if not unavailable(exc):
            raise
        wait.failed(f"read {topic}/{partition}", exc)
        return False
    return True
