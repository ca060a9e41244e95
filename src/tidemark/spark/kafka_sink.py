"""The ``tidemark-kafka`` sink: each (query, batch, input partition) is one Kafka transaction.

Lifecycle (Spark drives it): executors call ``write(batches)`` once per task attempt; the driver
then calls ``commit(messages, batch_id)`` or, when the batch failed, ``abort(messages, batch_id)``.

``write`` (also callable without Spark as :func:`write_partition`):

1. derives ``transactional.id = "{prefix}.{query_id}.{batch_id}.{partition}"`` and calls
   ``init_transactions``, which fences any earlier attempt of the same slot and aborts its
   open transaction;
2. looks for the slot's commit marker (read_committed); if present the slot already committed
   and the rows are skipped;
3. otherwise writes the rows and the marker in one transaction and commits it; on any error the
   transaction is aborted and the error re-raised.

Rows: ``value`` binary (required), ``key`` binary, ``topic`` string (else option ``topic``),
``partition`` int (else the producer's partitioner), ``headers`` array<struct<key, value>>.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Producer
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from tidemark.clock import now_ms
from tidemark.kafka.clients import produce_waiting, producer_config
from tidemark.kafka.commit_markers import CommitMarker, ensure_marker_topic, find_commit, marker_partition, \
    marker_partition_count
from tidemark.spark.options import InvalidOptionError, KafkaSinkOptions

log = logging.getLogger(__name__)

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_TIMEOUT_S = 30.0


class SinkColumnError(ValueError):
    """The rows given to the sink lack a column it needs."""


@dataclass(frozen=True, slots=True)
class SinkSlot:
    """Identity of one sink transaction: a query's batch's input partition."""

    query_id: str
    batch_id: int
    partition: int

    def transactional_id(self, prefix: str) -> str:
        return f"{prefix}.{self.query_id}.{self.batch_id}.{self.partition}"

    @classmethod
    def from_task_context(cls) -> SinkSlot:
        """The slot of the running Spark task (batch and query ids are task-local properties)."""
        context = TaskContext.get()
        if context is None:
            raise RuntimeError("tidemark-kafka sink: write() must run inside a Spark task")
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch is None or query is None:
            raise RuntimeError("tidemark-kafka sink: no streaming batch/query id in the task context")
        return cls(query, int(batch), context.partitionId())


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task reports to the driver."""

    query_id: str
    batch_id: int
    partition: int
    transactional_id: str
    records: int
    skipped: bool  # True: an earlier attempt had committed this slot; nothing was written


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """The driver's record of a batch: committed, or aborted with the failed partitions."""

    batch_id: int
    committed: bool
    written_partitions: tuple[int, ...]
    skipped_partitions: tuple[int, ...]
    failed_partitions: tuple[int, ...]
    records: int

    @classmethod
    def of(cls, batch_id: int, committed: bool, messages: list[Any]) -> BatchOutcome:
        done = [(i, m) for i, m in enumerate(messages) if isinstance(m, SinkCommitMessage)]
        return cls(
            batch_id=batch_id,
            committed=committed,
            written_partitions=tuple(m.partition for _, m in done if not m.skipped),
            skipped_partitions=tuple(m.partition for _, m in done if m.skipped),
            failed_partitions=tuple(i for i, m in enumerate(messages) if not isinstance(m, SinkCommitMessage)),
            records=sum(m.records for _, m in done),
        )


def _produce(producer: Producer, topic: str, value: Any, key: Any, partition: int | None, headers: Any) -> None:
    kwargs: dict[str, Any] = {"value": value, "key": key}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = [(h["key"], h["value"]) for h in headers]
    produce_waiting(producer, topic, **kwargs)


def _produce_batches(producer: Producer, batches: Iterable[pa.RecordBatch], default_topic: str | None) -> int:
    count = 0
    for batch in batches:
        names = batch.schema.names
        if "value" not in names:
            raise SinkColumnError(f"tidemark-kafka sink: rows need a 'value' column, got {names}")
        n = batch.num_rows
        column = {name: batch.column(name).to_pylist() for name in names if name in ("key", "value", "topic",
                                                                                      "partition", "headers")}
        values = column["value"]
        keys = column.get("key", [None] * n)
        topics = column.get("topic", [None] * n)
        parts = column.get("partition", [None] * n)
        headers = column.get("headers", [None] * n)
        for i in range(n):
            topic = topics[i] or default_topic
            if not topic:
                raise InvalidOptionError("topic", "row has no topic column value and no 'topic' option is set")
            _produce(producer, topic, values[i], keys[i], parts[i], headers[i])
        producer.poll(0)
        count += n
    return count


def write_partition(options: KafkaSinkOptions, slot: SinkSlot, batches: Iterable[pa.RecordBatch]) -> SinkCommitMessage:
    """Write one slot exactly once (see the module docstring); plain Python, no Spark needed."""
    txid = slot.transactional_id(options.transactional_id_prefix)
    producer = Producer(producer_config(options.client, txid, **{"transaction.timeout.ms": options.transaction_timeout_ms}))
    producer.init_transactions(_TIMEOUT_S)
    idle = options.transaction_timeout_ms / 1000 + 30
    partitions = marker_partition_count(options.client, options.marker_topic)
    if find_commit(options.client, options.marker_topic, slot.query_id, slot.batch_id, slot.partition,
                   window=options.marker_scan_window, idle_timeout_s=idle, partitions=partitions) is not None:
        log.info("tidemark-kafka sink: %s already committed, skipping", txid)
        for _ in batches:  # drain the input so Spark's feeding side finishes normally
            pass
        return SinkCommitMessage(slot.query_id, slot.batch_id, slot.partition, txid, 0, True)
    producer.begin_transaction()
    try:
        records = _produce_batches(producer, batches, options.topic)
        marker = CommitMarker(slot.query_id, slot.batch_id, slot.partition, txid, records, now_ms())
        producer.produce(options.marker_topic, key=marker.key, value=marker.encode(),
                         partition=marker_partition(marker.key, partitions))
        producer.commit_transaction(_TIMEOUT_S)
    except BaseException:
        _abort_quietly(producer, txid)
        raise
    return SinkCommitMessage(slot.query_id, slot.batch_id, slot.partition, txid, records, False)


def _abort_quietly(producer: Producer, txid: str) -> None:
    try:
        producer.abort_transaction(_TIMEOUT_S)
    except Exception as exc:  # the original error matters more; the broker times the transaction out
        log.warning("tidemark-kafka sink: abort of %s failed: %s", txid, exc)


def fence_slot(options: KafkaSinkOptions, slot: SinkSlot) -> None:
    """Abort whatever transaction an attempt of ``slot`` left open (init_transactions fences it)."""
    txid = slot.transactional_id(options.transactional_id_prefix)
    Producer(producer_config(options.client, txid)).init_transactions(_TIMEOUT_S)


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Spark stream writer; ``outcomes`` keeps what ``commit``/``abort`` recorded on this instance."""

    def __init__(self, options: KafkaSinkOptions, schema: StructType) -> None:
        if "value" not in schema.fieldNames():
            raise SinkColumnError(f"tidemark-kafka sink: rows need a 'value' column, got {schema.fieldNames()}")
        if options.topic is None and "topic" not in schema.fieldNames():
            raise InvalidOptionError("topic", "set the 'topic' option or give the rows a 'topic' column")
        self.options = options
        self.outcomes: list[BatchOutcome] = []
        ensure_marker_topic(options.client, options.marker_topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_partition(self.options, SinkSlot.from_task_context(), iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._record(BatchOutcome.of(batchId, True, list(messages)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Fence the failed partitions' slots (aborting transactions a dead task left open).

        Slots that did commit stay committed: a retry of the batch skips them by their marker.
        """
        outcome = BatchOutcome.of(batchId, False, list(messages))
        query_ids = {m.query_id for m in messages if isinstance(m, SinkCommitMessage)}
        for query_id in query_ids:
            for partition in outcome.failed_partitions:
                fence_slot(self.options, SinkSlot(query_id, batchId, partition))
        self._record(outcome)

    def _record(self, outcome: BatchOutcome) -> None:
        self.outcomes.append(outcome)
        log.info("tidemark-kafka sink batch outcome %s", json.dumps(asdict(outcome)))
