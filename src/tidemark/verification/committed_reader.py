"""Read every committed record of a topic from its beginning, as a job's downstream consumer sees
it (``isolation.level=read_committed``, no consumer group, nothing committed).

Lifecycle: ``CommittedReader(client, topic)`` -> :meth:`open` (waits for the topic to exist) ->
:meth:`poll` repeatedly (``at_end`` tells when every partition has been read up to its last
stable offset) -> :meth:`close` (or use it as a context manager). :func:`collect` is the one
loop that reads until a condition holds, then a little longer to catch late duplicates.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import topic_partitions


class UnknownTopic(LookupError):
    """The broker does not know the topic (not within the time waited for it)."""

    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


@dataclass(frozen=True, slots=True)
class CommittedRecord:
    key: bytes | None
    value: bytes | None
    partition: int
    offset: int
    timestamp_ms: int = 0  # the record's Kafka timestamp (a Tidemark output's: when it was written)


class CommittedReader:
    """One topic, every partition from offset 0, committed records only."""

    def __init__(self, client: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self._consumer = Consumer(consumer_config(dict(client), None, **{"enable.partition.eof": True}))
        self._at_end: dict[int, bool] = {}

    def __enter__(self) -> CommittedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, wait_s: float = 0.0) -> bool:
        """Assign every partition of the topic; False when it does not exist within ``wait_s``
        (a job creates its output topic when it starts)."""
        deadline = time.monotonic() + wait_s
        while not (partitions := topic_partitions(self._consumer, self.topic, 10)):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
        self._at_end = {p: False for p in partitions}
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in partitions])
        return True

    @property
    def partitions(self) -> list[int]:
        return sorted(self._at_end)

    @property
    def at_end(self) -> bool:
        """Every partition has been read to its end (for read_committed: the last stable offset)."""
        return bool(self._at_end) and all(self._at_end.values())

    def poll(self, timeout_s: float = 0.3) -> list[CommittedRecord]:
        records = []
        for message in self._consumer.consume(num_messages=1000, timeout=timeout_s):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._at_end[message.partition()] = True
                continue
            self._at_end[message.partition()] = False
            records.append(CommittedRecord(message.key(), message.value(), message.partition(), message.offset(),
                                           message.timestamp()[1]))
        return records

    def close(self) -> None:
        self._consumer.close()


def collect(reader: CommittedReader, *, until: Callable[[list[CommittedRecord]], bool] = lambda _: True,
            wait_s: float = 0.0, settle_s: float = 0.0, overrun_s: float = 30.0) -> list[CommittedRecord]:
    """Read from an opened ``reader`` until, at the end of every partition, ``until(records)``
    holds, or ``wait_s`` has passed and the reader is at the end (at most ``overrun_s`` later, for
    a topic written faster than it is read); then ``settle_s`` more, so that records arriving late
    (duplicates) are read too. ``until`` is asked again only when new records arrived."""
    records: list[CommittedRecord] = []
    started = time.monotonic()
    asked_at: int | None = None
    while True:
        records.extend(reader.poll())
        waited = time.monotonic() - started
        if reader.at_end and asked_at != len(records):
            asked_at = len(records)
            if until(records):
                break
        if waited >= wait_s and (reader.at_end or waited >= wait_s + overrun_s):
            break
    settle_until = time.monotonic() + settle_s
    while time.monotonic() < settle_until:
        records.extend(reader.poll(min(0.3, max(settle_until - time.monotonic(), 0.01))))
    return records


def read_to_end(client: dict[str, Any], topic: str) -> list[CommittedRecord]:
    """Every committed record of ``topic`` now; raises UnknownTopic."""
    with CommittedReader(client, topic) as reader:
        if not reader.open():
            raise UnknownTopic(topic)
        return collect(reader, wait_s=0.0, overrun_s=float("inf"))
