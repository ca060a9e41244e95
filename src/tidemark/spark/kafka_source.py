"""The ``tidemark-kafka`` source: Spark stream and batch readers over Kafka partitions.

Lifecycle (Spark drives it): on the driver, ``initialOffset`` once for a new query, then per
micro-batch ``latestOffset(start, limit)`` -> ``partitions(start, end)`` -> (executors run
``read(partition)``) -> ``commit(end)``; ``stop`` when the query ends. A restarted query skips
``initialOffset`` and resumes from the offsets in its checkpoint. While the broker is unreachable
the planning calls wait for it (:mod:`tidemark.kafka.outage`) instead of failing the query.
It reads every partition of the ``subscribe``-d topics or only the ``assign``-ed partitions
(:func:`tidemark.spark.offset_planning.source_partitions` decides, for every planning call).

The planning and reading functions are plain Python in :mod:`tidemark.spark.offset_planning` and
:mod:`tidemark.spark.arrow_range_reader` (re-exported here); the Kafka-only parts they build on (metadata
lookups, the range-reading loop) are in :mod:`tidemark.kafka`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from tidemark.kafka.metadata import TopicNotFoundError, metadata_consumer
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.range_reader import RangeNotReachedError
from tidemark.spark.arrow import arrow_schema
from tidemark.spark.offsets import OffsetRange, PartitionOffsets
from tidemark.spark.options import KafkaSourceOptions
from tidemark.spark.offset_planning import plan_latest, plan_ranges, resolve_starting
from tidemark.spark.arrow_range_reader import read_range

__all__ = [
    "KafkaRangePartition",
    "KafkaBatchReader",
    "KafkaStreamReader",
    "RangeNotReachedError",
    "TopicNotFoundError",
    "plan_latest",
    "read_range",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class KafkaRangePartition(InputPartition):
    """One Spark input partition: the offset range of one Kafka partition."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


def _read_partition(options: KafkaSourceOptions, schema: StructType, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    assert isinstance(partition, KafkaRangePartition), type(partition)
    return read_range(
        options.client,
        partition.range,
        isolation_level=options.isolation_level,
        batch_rows=options.arrow_batch_rows,
        idle_timeout_s=options.read_idle_timeout_ms / 1000,
        schema=arrow_schema(schema),
    )


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; offsets are :class:`PartitionOffsets` JSON."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._consumer: Any = None
        self._available_now_target: PartitionOffsets | None = None

    def _metadata(self) -> Any:
        if self._consumer is None:
            self._consumer = metadata_consumer(self.options.client, self.options.isolation_level)
        return self._consumer

    def _planning(self, operation: str, plan: Callable[[], T]) -> T:
        return broker_wait(self.options.client).call(operation, plan)

    def initialOffset(self) -> dict:
        offsets = self._planning("resolve the starting offsets", lambda: resolve_starting(
            self._metadata(), self.options.topics, self.options.starting, self.options.metadata_timeout_s,
            assigned=self.options.assigned))
        log.info("tidemark-kafka initial offsets %s", offsets.to_json())
        return offsets.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        empty = PartitionOffsets()
        self._available_now_target = self._planning("plan the available-now target", lambda: plan_latest(
            self._metadata(), self.options.topics, empty, timeout_s=self.options.metadata_timeout_s,
            assigned=self.options.assigned))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadMaxRows):
            max_records: int | None = limit.max_rows
        elif isinstance(limit, ReadAllAvailable):
            max_records = None
        else:
            raise ValueError(f"tidemark-kafka supports ReadAllAvailable and ReadMaxRows, not {limit!r}")
        end = self._planning("plan the next micro-batch", lambda: plan_latest(
            self._metadata(), self.options.topics, PartitionOffsets.from_json(start), max_records,
            self._available_now_target, self.options.metadata_timeout_s, assigned=self.options.assigned))
        return end.to_json()

    def reportLatestOffset(self) -> dict | None:
        return None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = self._planning("plan the micro-batch's ranges", lambda: plan_ranges(
            self._metadata(), PartitionOffsets.from_json(start), PartitionOffsets.from_json(end),
            self.options.metadata_timeout_s))
        return [KafkaRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.schema, partition)

    def commit(self, end: dict) -> None:
        log.info("tidemark-kafka committed source offsets %s", end)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "schema": self.schema, "_consumer": None,
                "_available_now_target": self._available_now_target}


class KafkaBatchReader(DataSourceReader):
    """Batch read of fixed ranges: ``startingOffsets`` (default earliest) to ``endingOffsets``
    (default latest), both resolved once when Spark plans the partitions."""

    def __init__(self, options: KafkaSourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        consumer = metadata_consumer(self.options.client, self.options.isolation_level)
        try:
            timeout, topics, assigned = self.options.metadata_timeout_s, self.options.topics, self.options.assigned
            start = resolve_starting(consumer, topics, self.options.starting, timeout, assigned=assigned)
            end = resolve_starting(consumer, topics, self.options.ending, timeout, assigned=assigned)
            ranges = plan_ranges(consumer, start, end, timeout)
        finally:
            consumer.close()
        return [KafkaRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.schema, partition)
