"""Options of the changelog writer and reader (frozen; rationale in docs/concepts/changelog.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChangelogWriterOptions:
    """How a :class:`~tidemark.changelog.writer.ChangelogWriter` produces.

    ``producer_overrides`` are librdkafka settings applied last (e.g. ``compression.type``);
    idempotence and ``acks=all`` cannot be turned off by them.
    """

    persist_timeout_s: float = 30.0
    linger_ms: int = 5
    batch_size_bytes: int = 1 << 20
    queue_max_messages: int = 500_000
    poll_every: int = 1_000
    producer_overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.persist_timeout_s <= 0 or self.poll_every < 1 or self.linger_ms < 0:
            raise ValueError(f"invalid changelog writer options: {self}")


@dataclass(frozen=True, slots=True)
class ChangelogReaderOptions:
    """How a :class:`~tidemark.changelog.reader.ChangelogReader` reads ranges.

    ``idle_timeout_s``: how long a partition may make no progress towards a range's end before
    the read fails (a range that cannot be reached is an error, never a shorter restore).
    """

    idle_timeout_s: float = 30.0
    batch_records: int = 10_000
    consumer_overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.idle_timeout_s <= 0 or self.batch_records < 1:
            raise ValueError(f"invalid changelog reader options: {self}")
