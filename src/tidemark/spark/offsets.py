"""The offset model of the Kafka source: next offset to read per (topic, partition).

JSON form (what Spark writes in its offset log, and what ``startingOffsets`` accepts):
``{"orders": {"0": 12, "1": 40}}``. In ``startingOffsets`` JSON, ``-2`` means earliest and
``-1`` latest for that partition (the Spark Kafka connector's convention).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from tidemark.protocol.messages import SourceOffset
from tidemark.types import TopicPartition

EARLIEST = -2
LATEST = -1


class OffsetFormatError(ValueError):
    """An offset JSON document does not have the ``{"topic": {"partition": offset}}`` shape."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Half-open range ``[start, end)`` of one Kafka partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def is_empty(self) -> bool:
        return self.end <= self.start


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Immutable map (topic, partition) -> next offset to read."""

    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)

    @classmethod
    def of(cls, items: Iterable[tuple[TopicPartition, int]]) -> PartitionOffsets:
        return cls(dict(sorted(items)))

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self.offsets)

    def __len__(self) -> int:
        return len(self.offsets)

    def __contains__(self, key: object) -> bool:
        return key in self.offsets

    def get(self, key: TopicPartition, default: int | None = None) -> int | None:
        return self.offsets.get(key, default)

    def __getitem__(self, key: TopicPartition) -> int:
        return self.offsets[key]

    def topics(self) -> set[str]:
        return {topic for topic, _ in self.offsets}

    def merged(self, other: PartitionOffsets) -> PartitionOffsets:
        """These offsets, overridden by ``other`` where both have a partition."""
        return PartitionOffsets.of({**self.offsets, **other.offsets}.items())

    def to_json(self) -> dict[str, dict[str, int]]:
        doc: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(self.offsets.items()):
            doc.setdefault(topic, {})[str(partition)] = int(offset)
        return doc

    @classmethod
    def from_json(cls, doc: object) -> PartitionOffsets:
        """Parse the JSON form (a dict or its string); raises OffsetFormatError."""
        if isinstance(doc, str):
            try:
                doc = json.loads(doc)
            except json.JSONDecodeError as exc:
                raise OffsetFormatError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise OffsetFormatError('expected {"topic": {"partition": offset}}')
        items: list[tuple[TopicPartition, int]] = []
        for topic, partitions in doc.items():
            if not isinstance(partitions, dict):
                raise OffsetFormatError(f"topic {topic!r}: expected an object of partition -> offset")
            for partition, offset in partitions.items():
                if not str(partition).lstrip("-").isdigit() or int(partition) < 0:
                    raise OffsetFormatError(f"topic {topic!r}: bad partition {partition!r}")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                    raise OffsetFormatError(f"{topic}/{partition}: bad offset {offset!r}")
                items.append((TopicPartition(str(topic), int(partition)), offset))
        return cls.of(items)

    def to_source_offsets(self) -> tuple[SourceOffset, ...]:
        """The protocol form carried in task acks."""
        return tuple(SourceOffset(topic, part, off) for (topic, part), off in sorted(self.offsets.items()))


class StartKind(str, enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    SPECIFIC = "specific"


@dataclass(frozen=True, slots=True)
class StartingOffsets:
    """Where a new query starts: every partition at earliest/latest, or specific offsets.

    With SPECIFIC, partitions the JSON does not name start at earliest; ``-2``/``-1`` entries
    are resolved to earliest/latest when the query starts.
    """

    kind: StartKind
    specific: PartitionOffsets = field(default_factory=PartitionOffsets)

    @classmethod
    def parse(cls, value: str) -> StartingOffsets:
        text = value.strip()
        if text.lower() in (StartKind.EARLIEST.value, StartKind.LATEST.value):
            return cls(StartKind(text.lower()))
        return cls(StartKind.SPECIFIC, PartitionOffsets.from_json(text))
