"""Records as the runtime sees them, and the headers that make a Kafka topic a channel.

A *channel* topic connects two stages of one job. Every record written to it carries
``tidemark-epoch`` (the writer's attempt) and ``tidemark-task`` (the writing task); after the data
of a checkpoint, the writing task appends one barrier record per partition whose
``tidemark-barrier`` header holds the encoded :class:`~tidemark.protocol.messages.Barrier`, and
when its watermark moves it appends one watermark record per partition whose
``tidemark-watermark`` header holds the watermark in decimal, followed by ``;idle`` when it comes
from idle inputs only (:mod:`tidemark.runtime.worker.watermarks`). A record an exchange reader
forwarded carries the input topic it was read from in ``tidemark-input``, so the stage reading
the exchange decodes and keys it as that input says. Records of other topics (the job's inputs)
carry none of these.

Tidemark's headers are validated wherever they are read, on input topics and on channels: an
epoch must be a decimal integer, a task id non-empty UTF-8 of at most 256 bytes, a barrier an
encoded ``Barrier``, an input a topic name, a watermark a decimal integer (optionally negative, ``;idle`` after it), and
each may appear once. A record that breaks a rule is not interpreted
at all: it carries ``header_error`` and the stage hands it to its error policy
(:mod:`tidemark.runtime.worker.record_errors`) instead of processing it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tidemark.protocol import codec
from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import BARRIER_HEADER, Barrier
from tidemark.runtime.worker.watermarks import WatermarkStatus
from tidemark.types import Channel, Epoch, TaskId, TopicPartition

EPOCH_HEADER = "tidemark-epoch"
TASK_HEADER = "tidemark-task"
WATERMARK_HEADER = "tidemark-watermark"
EVENT_TIME_HEADER = "tidemark-event-time"
INPUT_HEADER = "tidemark-input"
RUNTIME_HEADERS = (EPOCH_HEADER, TASK_HEADER, BARRIER_HEADER, WATERMARK_HEADER, EVENT_TIME_HEADER, INPUT_HEADER)
_MAX_TOPIC_BYTES = 249  # Kafka's longest topic name
_IDLE = b";idle"
_MAX_TASK_ID_BYTES = 256


@dataclass(slots=True)
class InputRecord:
    """One Kafka record read by a stage."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    epoch: Epoch | None = None  # channel records only
    task: TaskId | None = None  # channel records only
    barrier: Barrier | None = None  # set on barrier records
    watermark: WatermarkStatus | None = None  # set on watermark records
    event_time_ms: int | None = None  # a channel record's event time (jobs with event time)
    origin: str | None = None  # a forwarded record's input topic (an exchange's records)
    header_error: str | None = None  # a Tidemark header is malformed: the record is not processed
    headers: Any = None  # the raw headers (``[{"key", "value"}]``), kept for dead letters
    row: Any = None  # a Spark step's row (a dict of its columns): the value, not decoded again
    step_rejected: str | None = None  # the Spark step's required columns this record has null

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def channel(self) -> Channel:
        """The channel a channel record came through: its partition as its upstream task wrote it."""
        assert self.task is not None, "not a channel record"
        return Channel(self.topic, self.partition, self.task)

    def raw_headers(self) -> dict[str, bytes]:
        return {str(h["key"]): bytes(h["value"] or b"") for h in self.headers or ()}


def channel_headers(epoch: Epoch, task: TaskId) -> list[tuple[str, bytes]]:
    return [(EPOCH_HEADER, str(int(epoch)).encode()), (TASK_HEADER, task.encode())]


def barrier_headers(barrier: Barrier) -> list[tuple[str, bytes]]:
    return [*channel_headers(barrier.epoch, barrier.upstream_task), (BARRIER_HEADER, codec.encode(barrier))]


def watermark_value(status: WatermarkStatus) -> bytes:
    """The ``tidemark-watermark`` header (and value) of a watermark record."""
    return str(status.watermark).encode() + (_IDLE if status.idle else b"")


def watermark_headers(epoch: Epoch, task: TaskId, status: WatermarkStatus) -> list[tuple[str, bytes]]:
    return [*channel_headers(epoch, task), (WATERMARK_HEADER, watermark_value(status))]


def records_of(table: pa.Table | pa.RecordBatch) -> Iterator[InputRecord]:
    """The rows of a source batch (``tidemark.spark.arrow.SOURCE_SCHEMA``) as records.

    Column by column: timestamps become epoch milliseconds in Arrow (no ``datetime`` per record),
    and headers are turned into Python objects only when the batch has any (input topics seldom
    do; channel records always do)."""
    n = table.num_rows
    if n == 0:
        return
    topics = table.column("topic").to_pylist()
    partitions = table.column("partition").to_pylist()
    offsets = table.column("offset").to_pylist()
    stamps = epoch_ms(table.column("timestamp"))
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    header_column = table.column("headers")
    if not pc.max(pc.list_value_length(header_column)).as_py():  # one C-level map over the columns
        yield from map(InputRecord, topics, partitions, offsets, stamps, keys, values)
        return
    yield from map(record_of, topics, partitions, offsets, stamps, keys, values, header_column.to_pylist())


def record_of(topic: str, partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
              headers: list[dict[str, Any]] | None) -> InputRecord:
    """One record with headers (``[{"key", "value"}]``, as Arrow gives them): what Tidemark's
    headers carry, or why they are malformed."""
    epoch = task = barrier = watermark = event_time = origin = error = None
    if headers:
        try:
            epoch, task, barrier, watermark, event_time, origin = tidemark_headers(headers)
        except HeaderError as exc:
            error = str(exc)
    return InputRecord(topic, partition, offset, timestamp_ms, key, value, epoch, task, barrier, watermark,
                       event_time, origin, error, headers)


def batch_ends(table: pa.Table | pa.RecordBatch, rows: int | None = None) -> dict[TopicPartition, int]:
    """The position after a source batch's last record in each of its partitions (its highest
    offset + 1), computed in Arrow; ``rows``: of the batch's first so many rows only."""
    if rows is not None:
        table = table.slice(0, rows)
    if table.num_rows == 0:
        return {}
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    grouped = table.group_by(["topic", "partition"]).aggregate([("offset", "max")])
    return {TopicPartition(topic, partition): offset + 1 for topic, partition, offset in
            zip(grouped.column("topic").to_pylist(), grouped.column("partition").to_pylist(),
                grouped.column("offset_max").to_pylist())}


def stepped_records(table: pa.Table, row_columns: tuple[str, ...], rejected_column: str | None = None,
                    originals: pa.Table | None = None) -> Iterator[InputRecord]:
    """The rows of a Spark step's output (:mod:`tidemark.spark.spark_step`) as records: the origin
    and the Kafka columns the step kept, the other columns (``row_columns``) as each record's
    ``row``; ``rejected_column`` (when the step has required columns) names the null ones, and
    ``originals`` holds the original Kafka columns of such rows when the step dropped ``value``.
    In each partition's offset order, whatever order the step's plan left them in (a shuffle join
    does not keep it); the rows of one record (a join that matched twice) in the step's order.

    Column by column, as :func:`records_of`: each column is converted once, the rows become dicts
    in Arrow (one struct array per chunk), and the records are made in one C-level map, unless a
    row has headers (checked one by one) or a rejected row's original columns are looked up."""
    n = table.num_rows
    if n == 0:
        return
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    names = set(table.column_names)

    def column(name: str) -> list[Any]:
        return table.column(name).to_pylist() if name in names else [None] * n

    topics, partitions, offsets = column("topic"), column("partition"), column("offset")
    stamps = epoch_ms(table.column("timestamp")) if "timestamp" in names else [0] * n
    keys, values = column("key"), column("value")
    rows: Any = row_dicts(table, row_columns) if row_columns else repeat(None)
    rejected = column(rejected_column) if rejected_column is not None else [None] * n
    with_headers = "headers" in names and pc.max(pc.list_value_length(table.column("headers"))).as_py()
    if not with_headers and originals is None:  # the usual batch: no record needs a look of its own
        marks: Any = [mark or None for mark in rejected] if any(rejected) else repeat(None)
        yield from map(InputRecord, topics, partitions, offsets, stamps, keys, values,
                       *[repeat(None)] * 8, rows, marks)  # epoch .. headers: none on a job's input
        return
    all_headers = column("headers")
    found = {}
    if originals is not None:
        found = {(r["topic"], r["partition"], r["offset"]): r for r in originals.to_pylist()}
    for i, row in zip(range(n), rows):
        headers, stamp, key, value = all_headers[i], stamps[i], keys[i], values[i]
        if rejected[i] and (topics[i], partitions[i], offsets[i]) in found:
            original = found[(topics[i], partitions[i], offsets[i])]
            key, value, headers = original["key"], original["value"], original["headers"]
            moment = original["timestamp"]
            stamp = int(moment.timestamp() * 1_000_000) // 1000 if moment is not None else 0
        error = None
        if headers:
            try:
                tidemark_headers(headers)
            except HeaderError as exc:
                error = str(exc)
        yield InputRecord(topic=topics[i], partition=partitions[i], offset=offsets[i],
                          timestamp_ms=stamp, key=key, value=value,
                          header_error=error, headers=headers, row=row, step_rejected=rejected[i] or None)


def epoch_ms(column: pa.ChunkedArray | pa.Array) -> list[int]:
    """A timestamp column (microseconds since the epoch, as Spark gives it) in epoch milliseconds,
    0 where it is null: converted in Arrow, no ``datetime`` per record."""
    return [stamp // 1000 if stamp is not None else 0 for stamp in column.cast(pa.int64()).to_pylist()]


def row_dicts(table: pa.Table, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """The rows of ``columns`` of ``table`` as dicts, made by Arrow (a struct array per chunk);
    ``Table.to_pylist`` when a name repeats (a struct's dict cannot hold both)."""
    selected = table.select(list(columns))
    if len(set(columns)) != len(columns):
        return selected.to_pylist()
    rows: list[dict[str, Any]] = []
    for batch in selected.to_batches():
        rows.extend(batch.to_struct_array().to_pylist())
    return rows


class HeaderError(ValueError):
    """A Tidemark header of a record is malformed (see the module docstring)."""


def tidemark_headers(headers: list[dict[str, Any]]) -> tuple[
        Epoch | None, TaskId | None, Barrier | None, WatermarkStatus | None, int | None, str | None]:
    """The epoch, task, barrier, watermark, event time and input topic a record's headers carry;
    ``HeaderError`` if one is malformed."""
    epoch = task = barrier = watermark = event_time = origin = None
    seen: set[str] = set()
    for header in headers:
        name, raw = header["key"], header["value"]
        if name not in RUNTIME_HEADERS:
            continue
        if name in seen:
            raise HeaderError(f"header {name} appears more than once")
        seen.add(name)
        if raw is None:
            raise HeaderError(f"header {name} has no value")
        if name == EPOCH_HEADER:
            if not (0 < len(raw) <= 19 and raw.isdigit() and raw.isascii()):
                raise HeaderError(f"header {name} is not a decimal epoch: {bytes(raw[:40])!r}")
            epoch = Epoch(int(raw))
        elif name == TASK_HEADER:
            task = TaskId(_text(name, raw, _MAX_TASK_ID_BYTES, "a task id"))
        elif name == INPUT_HEADER:
            origin = _text(name, raw, _MAX_TOPIC_BYTES, "a topic")
        elif name == WATERMARK_HEADER:
            watermark = _watermark(bytes(raw))
        elif name == EVENT_TIME_HEADER:
            event_time = _milliseconds(name, bytes(raw))
        else:
            try:
                message: Any = codec.decode(raw)
            except DecodeError as exc:
                raise HeaderError(f"header {name} is not a barrier: {exc}") from None
            if not isinstance(message, Barrier):
                raise HeaderError(f"header {name} holds a {type(message).__name__}, not a Barrier")
            barrier = message
    if barrier is not None and watermark is not None:
        raise HeaderError(f"a record cannot be both a barrier and a watermark ({WATERMARK_HEADER})")
    return epoch, task, barrier, watermark, event_time, origin


def _text(name: str, raw: bytes, most: int, what: str) -> str:
    """Non-empty printable UTF-8 of at most ``most`` bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if not text or len(raw) > most or not text.isprintable():
        raise HeaderError(f"header {name} is not {what}: {bytes(raw[:40])!r}")
    return text


def _watermark(raw: bytes) -> WatermarkStatus:
    idle = raw.endswith(_IDLE)
    return WatermarkStatus(_milliseconds(WATERMARK_HEADER, raw[:-len(_IDLE)] if idle else raw), idle)


def _milliseconds(name: str, raw: bytes) -> int:
    """A signed 64-bit decimal."""
    number = raw[1:] if raw.startswith(b"-") else raw
    if not (0 < len(number) <= 19 and number.isdigit() and number.isascii()):
        raise HeaderError(f"header {name} is not a time in ms: {raw[:40]!r}")
    value = int(raw)
    if not -(2**63) <= value < 2**63:
        raise HeaderError(f"header {name} is out of range: {raw[:40]!r}")
    return value
