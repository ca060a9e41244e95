"""Pure parts of the changelog layer: partition rule, record keys, topic spec, handle planning."""

from __future__ import annotations

import pytest

from tidemark.changelog import (
    ChangelogMark,
    ChangelogReaderOptions,
    ChangelogSource,
    ChangelogWriterOptions,
    changelog_topic,
    key_groups_of,
    partition_of,
    partitions_of,
)
from tidemark.changelog.partitioning import check_partitions, key_group_of_record_key, record_key
from tidemark.changelog.backend.restore import plan_handles
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import StateFile, StateHandle, StateHandleKind
from tidemark.keygroups import KeyGroupRange, compute_key_group_range
from tidemark.types import KeyGroup, OperatorId


@pytest.mark.parametrize("max_parallelism", [1, 7, 128, 300])
def test_key_groups_of_inverts_partition_of(max_parallelism: int) -> None:
    for partitions in range(1, min(max_parallelism, 40) + 1):
        seen = []
        for partition in range(partitions):
            held = key_groups_of(partition, partitions, max_parallelism)
            assert len(held) >= 1
            assert all(partition_of(kg, partitions, max_parallelism) == partition for kg in held)
            seen.extend(held)
        assert seen == list(range(max_parallelism))


def test_partitions_of_a_task_range() -> None:
    # 3 partitions, max parallelism 128, parallelism 2: partition 1 is shared by both tasks.
    first, second = (compute_key_group_range(128, 2, i) for i in range(2))
    assert list(partitions_of(first, 3, 128)) == [0, 1]
    assert list(partitions_of(second, 3, 128)) == [1, 2]
    assert list(partitions_of(KeyGroupRange(5, 4), 3, 128)) == []


def test_partition_count_is_checked() -> None:
    check_partitions(128, 128)
    with pytest.raises(ValueError):
        check_partitions(0, 128)
    with pytest.raises(ValueError):
        check_partitions(129, 128)


def test_record_key_round_trip() -> None:
    for kg in (0, 1, 255, 256, 32767):
        assert key_group_of_record_key(record_key(kg)) == kg
    assert key_group_of_record_key(None) is None
    assert key_group_of_record_key(b"abc") is None


def test_changelog_topic_spec() -> None:
    spec = changelog_topic(TopicNames("tm"), "job 1", "count", 4)
    assert spec.name == "tm.changelog.job_1.count"
    assert spec.partitions == 4
    assert spec.config["cleanup.policy"] == "delete"
    assert spec.config["retention.ms"] == "-1"
    with pytest.raises(ValueError):
        changelog_topic(TopicNames("tm"), "job", "count", 0)


def test_mark_counts() -> None:
    mark = ChangelogMark(5, ((0, 2), (3, 3)))
    assert (mark.count(0), mark.count(1), mark.count(3)) == (2, 0, 3)


def test_options_are_validated() -> None:
    with pytest.raises(ValueError):
        ChangelogWriterOptions(persist_timeout_s=0)
    with pytest.raises(ValueError):
        ChangelogReaderOptions(batch_records=0)


def _handle(start: int, end: int, name: str) -> StateHandle:
    return StateHandle(StateHandleKind.KEYED_FULL, OperatorId("op"), KeyGroup(start), KeyGroup(end),
                       (StateFile(name, 1, "0" * 64),), 1, 1)


def test_plan_handles_clips_carried_handles_to_their_source() -> None:
    own = _handle(0, 42, "own")  # inside its source: restored natively
    carried = _handle(0, 63, "carried")  # a predecessor's, wider than the source that carries it
    elsewhere = _handle(100, 127, "elsewhere")
    sources = [
        ChangelogSource(KeyGroupRange(0, 42), (own,)),
        ChangelogSource(KeyGroupRange(43, 85), (carried, elsewhere)),
    ]
    native, clipped = plan_handles(sources, KeyGroupRange(30, 70))
    assert native == [own]
    assert clipped == [(carried, KeyGroupRange(43, 63))]
    native, clipped = plan_handles(sources, KeyGroupRange(64, 127))
    assert (native, clipped) == ([], [])
