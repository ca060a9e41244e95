"""The changelog state backend's Kafka layer (Flink's DSTL): writer, reader, recovery, wrapper.

See ``docs/concepts/changelog.md`` for the design.
"""

from tidemark.changelog.backend import ChangelogSnapshot, ChangelogStateBackend
from tidemark.changelog.errors import ChangelogReadError, ChangelogWriteError
from tidemark.changelog.options import ChangelogReaderOptions, ChangelogWriterOptions
from tidemark.changelog.partitioning import (
    changelog_topic,
    key_groups_of,
    partition_of,
    partitions_of,
)
from tidemark.changelog.reader import ChangelogReader, ReadStats
from tidemark.changelog.restore import RestoreResult, restore_from_changelog
from tidemark.changelog.source import ChangelogSource
from tidemark.changelog.writer import ORIGIN, ChangelogMark, ChangelogWriter

__all__ = [
    "ORIGIN",
    "ChangelogMark",
    "ChangelogReadError",
    "ChangelogReader",
    "ChangelogReaderOptions",
    "ChangelogSnapshot",
    "ChangelogSource",
    "ChangelogStateBackend",
    "ChangelogWriteError",
    "ChangelogWriter",
    "ChangelogWriterOptions",
    "ReadStats",
    "RestoreResult",
    "changelog_topic",
    "key_groups_of",
    "partition_of",
    "partitions_of",
    "restore_from_changelog",
]
