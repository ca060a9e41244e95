"""Row layout of Kafka records in Spark and Arrow, and a bulk column builder.

Headers are ``array<struct<key: string, value: binary>>`` (as in Spark's own Kafka connector):
Kafka allows repeated header keys and keeps their order, which a map would lose.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])

SOURCE_SCHEMA = StructType(
    [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", ArrayType(HEADER_TYPE, True), True),
    ]
)
"""What the source yields, one row per Kafka record."""

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")
"""Columns the sink understands; ``value`` is required, the others optional."""


def arrow_schema(schema: StructType = SOURCE_SCHEMA) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (timestamps in UTC microseconds)."""
    return to_arrow_schema(schema, timezone="UTC")


class RecordColumns:
    """Accumulates consumed Kafka messages column-wise and emits ``pyarrow.RecordBatch``es.

    Lifecycle: ``add`` messages of one partition, ``flush`` whenever a batch is wanted (it
    resets the builder), repeat.
    """

    __slots__ = ("_schema", "_topic", "_partition", "offsets", "timestamps", "keys", "values", "headers")

    def __init__(self, topic: str, partition: int, schema: pa.Schema | None = None) -> None:
        self._schema = schema or arrow_schema()
        self._topic = topic
        self._partition = partition
        self._reset()

    def _reset(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any) -> None:
        """Append one confluent-kafka ``Message`` (data, not an error event)."""
        self.offsets.append(message.offset())
        kind, millis = message.timestamp()
        self.timestamps.append(millis * 1000 if kind else None)
        self.keys.append(message.key())
        self.values.append(message.value())
        raw = message.headers()
        self.headers.append([{"key": k, "value": v} for k, v in raw] if raw else None)

    def flush(self) -> pa.RecordBatch:
        """The accumulated rows as one RecordBatch in the schema's column order."""
        count = len(self.offsets)
        built = {
            "topic": pa.array([self._topic] * count, type=pa.string()),
            "partition": pa.array([self._partition] * count, type=pa.int32()),
            "offset": pa.array(self.offsets, type=pa.int64()),
            "timestamp": pa.array(self.timestamps, type=pa.int64()),
            "key": pa.array(self.keys, type=pa.binary()),
            "value": pa.array(self.values, type=pa.binary()),
            "headers": self.headers,
        }
        arrays = []
        for schema_field in self._schema:
            column = built[schema_field.name]
            if schema_field.name == "timestamp":
                column = column.cast(schema_field.type)
            elif not isinstance(column, pa.Array):
                column = pa.array(column, type=schema_field.type)
            arrays.append(column)
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self._schema)
