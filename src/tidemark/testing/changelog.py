"""An in-memory changelog for tests: a topic held in lists, a writer and a reader over it.

:class:`InMemoryChangelogWriter` subclasses the real abstract writer
(:class:`~tidemark.changelog.writer.StateChangelogWriter`): marks, ranges, confirm, reset and
truncate are the real ones; only sending is replaced (a record is durable at once, its offset
is its index in the partition). :class:`InMemoryChangelogReader` subclasses the real reader and
replaces only the consumer: the ranges, owners and key-group clipping are read by the real code.
Not for production: nothing survives the process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tidemark.changelog.errors import ChangelogReadError
from tidemark.changelog.reader import ChangelogReader, ReadStats, StateMetaCallback, _Cursor
from tidemark.changelog.writer import ChangelogMark, StateChangelogWriter
from tidemark.state.table import KeyedStateChange
from tidemark.types import Epoch, JobId, TaskId, TopicPartition


@dataclass
class InMemoryChangelogTopic:
    """One changelog topic: ``records[partition]`` is the list of ``(key, value)`` records."""

    name: str
    partitions: int
    records: dict[int, list[tuple[bytes, bytes]]] = field(default_factory=dict)

    def append(self, partition: int, key: bytes, value: bytes) -> int:
        log = self.records.setdefault(partition, [])
        log.append((key, value))
        return len(log) - 1


class InMemoryChangelogWriter(StateChangelogWriter):
    """A changelog writer whose records are durable the moment they are appended."""

    def __init__(self, topic: InMemoryChangelogTopic, *, max_parallelism: int, job_id: str = "job",
                 task_id: str = "op#0", epoch: int = 0) -> None:
        super().__init__(topic.name, partitions=topic.partitions, max_parallelism=max_parallelism,
                         job_id=JobId(job_id), task_id=TaskId(task_id), epoch=Epoch(epoch))
        self.log = topic

    def _send(self, partition: int, key: bytes, value: bytes) -> None:
        self._delivered(partition, self.log.append(partition, key, value))

    def _await_delivery(self, up_to: ChangelogMark) -> None:
        assert self._all_delivered(up_to)  # delivered on append

    def flush(self, timeout_s: float | None = None) -> int:
        self._check_usable()
        return 0

    def _close_transport(self) -> None:
        """Nothing to release: the records stay in the topic."""


class _Record:
    """The part of a Kafka message the reader looks at."""

    __slots__ = ("_topic", "_partition", "_offset", "_key", "_value")

    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: bytes) -> None:
        self._topic, self._partition, self._offset = topic, partition, offset
        self._key, self._value = key, value

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None


class InMemoryChangelogReader(ChangelogReader):
    """The changelog reader over an :class:`InMemoryChangelogTopic`."""

    def __init__(self, topic: InMemoryChangelogTopic, *, max_parallelism: int) -> None:
        super().__init__({}, partitions=topic.partitions, max_parallelism=max_parallelism)
        self.log = topic

    def _read_cursors(self, cursors: dict[TopicPartition, _Cursor], stats: ReadStats,
                      on_state_meta: StateMetaCallback | None) -> Iterator[KeyedStateChange]:
        for (topic, partition), cursor in cursors.items():
            records = self.log.records.get(partition, []) if topic == self.log.name else []
            while not cursor.done:
                start, end = cursor.intervals[cursor.index]
                cursor.position = start
                for offset in range(start, min(end, len(records))):
                    key, value = records[offset]
                    change = self._accept(cursor, _Record(topic, partition, offset, key, value),  # type: ignore[arg-type]
                                          stats, on_state_meta)
                    if change is not None:
                        yield change
                if end > len(records):
                    raise ChangelogReadError(f"{topic}/{partition}: position {len(records)} did not "
                                             f"reach the range end {end}")
                cursor.index += 1
