"""Records as the runtime sees them, and the headers that make a Kafka topic a channel.

A *channel* topic connects two stages of one job. Every record written to it carries
``tidemark-epoch`` (the writer's attempt) and ``tidemark-task`` (the writing task); after the data
of a checkpoint, the writing task appends one barrier record per partition whose
``tidemark-barrier`` header holds the encoded :class:`~tidemark.protocol.messages.Barrier`.
Records of other topics (the job's inputs) carry none of these.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from tidemark.protocol import codec
from tidemark.protocol.messages import BARRIER_HEADER, Barrier
from tidemark.types import Epoch, TaskId

EPOCH_HEADER = "tidemark-epoch"
TASK_HEADER = "tidemark-task"


@dataclass(frozen=True, slots=True)
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

    @property
    def position(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def channel_headers(epoch: Epoch, task: TaskId) -> list[tuple[str, bytes]]:
    return [(EPOCH_HEADER, str(int(epoch)).encode()), (TASK_HEADER, task.encode())]


def barrier_headers(barrier: Barrier) -> list[tuple[str, bytes]]:
    return [*channel_headers(barrier.epoch, barrier.upstream_task), (BARRIER_HEADER, codec.encode(barrier))]


def records_of(table: pa.Table | pa.RecordBatch) -> Iterator[InputRecord]:
    """The rows of a source batch (``tidemark.spark.arrow.SOURCE_SCHEMA``) as records."""
    columns = {name: table.column(name).to_pylist() for name in
               ("topic", "partition", "offset", "timestamp", "key", "value", "headers")}
    for i in range(table.num_rows):
        headers = columns["headers"][i] or ()
        epoch = task = barrier = None
        for header in headers:
            name, raw = header["key"], header["value"]
            if name == EPOCH_HEADER and raw is not None:
                epoch = Epoch(int(raw))
            elif name == TASK_HEADER and raw is not None:
                task = TaskId(raw.decode())
            elif name == BARRIER_HEADER and raw is not None:
                message: Any = codec.decode(raw)
                if isinstance(message, Barrier):
                    barrier = message
        stamp = columns["timestamp"][i]
        yield InputRecord(
            topic=columns["topic"][i], partition=columns["partition"][i], offset=columns["offset"][i],
            timestamp_ms=int(stamp.timestamp() * 1000) if stamp is not None else 0,
            key=columns["key"][i], value=columns["value"][i], epoch=epoch, task=task, barrier=barrier,
        )
