"""The changelog's Kafka layer (Flink's DSTL): writer, reader, partitioning, truncation.

The changelog state backend that uses them is :mod:`tidemark.changelog.backend`. See
``docs/concepts/changelog.md`` for the design.
"""

from tidemark.changelog.errors import ChangelogReadError, ChangelogWriteError
from tidemark.changelog.options import ChangelogReaderOptions, ChangelogWriterOptions
from tidemark.changelog.partitioning import (
    changelog_topic,
    key_groups_of,
    partition_of,
    partitions_of,
)
from tidemark.changelog.reader import ChangelogReader, ReadStats
from tidemark.changelog.source import ChangelogSource
from tidemark.changelog.writer import ORIGIN, ChangelogMark, ChangelogWriter, StateChangelogWriter

__all__ = [
    "ORIGIN",
    "ChangelogMark",
    "ChangelogReadError",
    "ChangelogReader",
    "ChangelogReaderOptions",
    "ChangelogSource",
    "ChangelogWriteError",
    "ChangelogWriter",
    "ChangelogWriterOptions",
    "ReadStats",
    "StateChangelogWriter",
    "changelog_topic",
    "key_groups_of",
    "partition_of",
    "partitions_of",
]
