"""Read one planned offset range of one Kafka partition into Arrow record batches.

Plain Python, used by the Spark source. :func:`read_range` keeps the contract of
:func:`tidemark.kafka.range_reader.read_messages` (offset order, stops at ``end``, an empty range
contacts no broker, :class:`~tidemark.kafka.range_reader.RangeNotReachedError` when ``end`` is not
reached within ``idle_timeout_s``, waits out broker outages) and delivers the records as
``pyarrow.RecordBatch``es of at most ``batch_rows`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import closing
from typing import Any

import pyarrow as pa

from tidemark.kafka.range_reader import read_messages
from tidemark.spark.arrow import RecordColumns, arrow_schema
from tidemark.spark.offsets import OffsetRange


def read_range(
    client: Mapping[str, Any],
    offset_range: OffsetRange,
    *,
    isolation_level: str = "read_committed",
    batch_rows: int = 10_000,
    idle_timeout_s: float = 30.0,
    schema: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as record batches (see the module docstring)."""
    if offset_range.is_empty:
        return
    r = offset_range
    columns = RecordColumns(r.topic, r.partition, schema or arrow_schema())
    chunks = read_messages(client, r.topic, r.partition, r.start, r.end, isolation_level=isolation_level,
                           max_messages=min(batch_rows, 10_000), idle_timeout_s=idle_timeout_s)
    with closing(chunks):
        for messages in chunks:
            for message in messages:
                columns.add(message)
            if len(columns) >= batch_rows:
                yield columns.flush()
    if len(columns):
        yield columns.flush()
