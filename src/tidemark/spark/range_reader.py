"""Read one planned offset range of one Kafka partition into Arrow record batches.

Plain Python, shared by the Spark source and the worker runtime. Contract of :func:`read_range`:

- yields exactly the records with ``start <= offset < end`` that the isolation level lets the
  consumer see, in offset order, as ``pyarrow.RecordBatch``es of at most ``batch_rows`` rows;
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

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import brokers_listed
from tidemark.kafka.outage import PROBE_TIMEOUT_S, BrokerWait, broker_wait, unavailable
from tidemark.spark.arrow import RecordColumns, arrow_schema
from tidemark.spark.offsets import OffsetRange

_POLL_S = 0.2
_STALL_WARNING_S = 10.0

log = logging.getLogger(__name__)


class RangeNotReachedError(RuntimeError):
    """The consumer could not reach the planned end of a range within the idle timeout."""


def range_consumer(client: Mapping[str, Any], isolation_level: str = "read_committed") -> Consumer:
    """An assign()-mode consumer (no group) that reports partition EOF."""
    return Consumer(consumer_config(dict(client), None, **{"enable.partition.eof": True,
                                                            "isolation.level": isolation_level}))


def read_range(
    client: Mapping[str, Any],
    offset_range: OffsetRange,
    *,
    isolation_level: str = "read_committed",
    batch_rows: int = 10_000,
    idle_timeout_s: float = 30.0,
    schema: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as record batches (see the module contract)."""
    if offset_range.is_empty:
        return
    consumer = range_consumer(client, isolation_level)
    try:
        yield from _consume(consumer, offset_range, batch_rows, idle_timeout_s, schema or arrow_schema(),
                            broker_wait(client))
    finally:
        consumer.close()


def _consume(
    consumer: Consumer, r: OffsetRange, batch_rows: int, idle_timeout_s: float, schema: pa.Schema,
    wait: BrokerWait,
) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(r.topic, r.partition, r.start)
    consumer.assign([tp])
    columns = RecordColumns(r.topic, r.partition, schema)
    position = r.start
    last_progress = last_warning = time.monotonic()
    while position < r.end:
        messages = consumer.consume(num_messages=min(batch_rows, 10_000), timeout=_POLL_S)
        before = position
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    position = max(position, message.offset())
                elif unavailable(error):  # librdkafka keeps fetching once the broker is back
                    wait.failed(f"read {r.topic}/{r.partition}", error)
                else:
                    raise KafkaException(error)
                continue
            if message.offset() >= r.end:
                position = r.end
                break
            columns.add(message)
            position = max(position, message.offset() + 1)
        if position < r.end:
            reported = consumer.position([TopicPartition(r.topic, r.partition)])[0].offset
            position = max(position, reported)
        if len(columns) >= batch_rows:
            yield columns.flush()
        now = time.monotonic()
        if position > before:
            last_progress = last_warning = now
            if wait.waiting:
                wait.succeeded()
        elif now - last_progress > idle_timeout_s and not _broker_answers(consumer, wait, r):
            last_progress = last_warning = now  # an outage: the idle timeout starts again
        elif now - last_progress > idle_timeout_s:
            raise RangeNotReachedError(
                f"{r.topic}/{r.partition}: position {position} did not reach the planned end {r.end} "
                f"(range start {r.start}) within {idle_timeout_s}s"
            )
        elif now - last_warning >= _STALL_WARNING_S:
            last_warning = now
            log.warning("%s/%s: position %s short of the planned end %s for %.0fs (timeout %gs)",
                        r.topic, r.partition, position, r.end, now - last_progress, idle_timeout_s)
    if len(columns):
        yield columns.flush()


def _broker_answers(consumer: Consumer, wait: BrokerWait, r: OffsetRange) -> bool:
    """Whether the broker answers a Metadata request now (an unanswered one is an outage)."""
    try:
        brokers_listed(consumer, PROBE_TIMEOUT_S)
    except KafkaException as exc:
        if not unavailable(exc):
            raise
        wait.failed(f"read {r.topic}/{r.partition}", exc)
        return False
    return True
