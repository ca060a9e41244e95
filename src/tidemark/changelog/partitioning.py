"""Where a state change goes: the changelog topic of an operator and the partition of a key group.

Partition rule (fixed for the life of a topic): ``partition = key_group * partitions //
max_parallelism``, Flink's operator-index formula with the partitions as the parallelism
(:mod:`tidemark.keygroups`). Each partition therefore holds a contiguous slice of key groups, and every
change of one key group lands in one partition, in the order it was appended.
"""

from __future__ import annotations

import struct

from tidemark.kafka.topics import TopicNames, TopicSpec
from tidemark.keygroups import KeyGroupRange, check_max_parallelism, operator_index, range_end, range_start

CHANGELOG_TOPIC_CONFIG: dict[str, str] = {
    "cleanup.policy": "delete",  # never compaction: ranges address individual records
    "retention.ms": "-1",  # only truncation (DeleteRecords) removes records
    "retention.bytes": "-1",
}

_KEY = struct.Struct(">H")


def check_partitions(partitions: int, max_parallelism: int) -> None:
    check_max_parallelism(max_parallelism)
    if not 1 <= partitions <= max_parallelism:
        raise ValueError(
            f"changelog partitions must be in [1, max_parallelism={max_parallelism}], got {partitions}"
        )


def partition_of(key_group: int, partitions: int, max_parallelism: int) -> int:
    """The changelog partition holding ``key_group``."""
    return int(operator_index(max_parallelism, partitions, key_group))


def key_groups_of(partition: int, partitions: int, max_parallelism: int) -> KeyGroupRange:
    """Every key group that ``partition`` holds (inverse of :func:`partition_of`)."""
    return KeyGroupRange(range_start(max_parallelism, partitions, partition),
                         range_end(max_parallelism, partitions, partition))


def partitions_of(key_groups: KeyGroupRange, partitions: int, max_parallelism: int) -> range:
    """The partitions holding at least one key group of ``key_groups``."""
    if not len(key_groups):
        return range(0)
    return range(partition_of(key_groups.start, partitions, max_parallelism),
                 partition_of(key_groups.end, partitions, max_parallelism) + 1)


STATE_META_KEY = b"tidemark-state-meta"
"""Kafka key of a state-metadata record (a state's definition, logged when a writer's task
registers it). It is not a key-group key, so readers that do not know it skip the record."""


def record_key(key_group: int) -> bytes:
    """Kafka key of a change record: its key group, 2 bytes big-endian (a cheap pre-filter)."""
    return _KEY.pack(key_group)


def key_group_of_record_key(key: bytes | None) -> int | None:
    """Inverse of :func:`record_key`; ``None`` for a key that is not one."""
    if key is None or len(key) != _KEY.size:
        return None
    return int(_KEY.unpack(key)[0])


def changelog_topic(names: TopicNames, job_id: str, operator_id: str, partitions: int) -> TopicSpec:
    """The spec of one operator's changelog topic (create it with ``kafka.admin.ensure_topics``)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return TopicSpec(names.changelog(job_id, operator_id), partitions, dict(CHANGELOG_TOPIC_CONFIG))
