"""ChangelogWriter against the real broker: exact ranges from delivery reports, lifecycle."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from changelog_helpers import read_offsets
from tidemark.changelog import ORIGIN, ChangelogSource, ChangelogWriteError, partition_of
from tidemark.protocol import codec
from tidemark.protocol.messages import ChangelogRange, StateChange, StateChangeOp
from tidemark.state import KeyedStateChange, KeyGroupRange
from tidemark.types import CheckpointId

MAX_P = 128


def change(key_group: int, n: int) -> KeyedStateChange:
    return KeyedStateChange("s", key_group, b"i" + n.to_bytes(8, "big"), b"", StateChangeOp.PUT,
                            None, n.to_bytes(4, "big"))


def test_persist_returns_exact_ranges_around_another_writer(make_topic, make_writer, client) -> None:
    """Ranges start at the writer's first and end after its last record, per partition, even
    when another writer's records are interleaved in a shared partition."""
    topic = make_topic(3)
    mine, other = make_writer(topic, 3, task="op#0"), make_writer(topic, 3, task="op#1")
    other.append(change(50, 0))  # partition 1 starts with a foreign record
    other.persist(other.next_sequence_number(), CheckpointId(1))
    for n in range(300):
        mine.append(change(n % 64, n))  # key groups 0..63 -> partitions 0 and 1
        if n % 50 == 49:  # make both writers' records durable in turn: they interleave
            mine.persist(mine.next_sequence_number(), CheckpointId(n))
            other.append(change(60, n))
            other.persist(other.next_sequence_number(), CheckpointId(n))
    ranges = mine.persist(mine.next_sequence_number(), CheckpointId(1000))
    assert [r.partition for r in ranges] == [0, 1]
    by_partition = {p: sum(1 for n in range(300) if partition_of(n % 64, 3, MAX_P) == p) for p in (0, 1)}
    for r in ranges:
        records = _records(client, r)
        assert records[0].offset() == r.start_offset and records[-1].offset() == r.end_offset - 1
        own = [m for m in records if codec.decode_as(m.value(), StateChange).task_id == "op#0"]
        assert len(own) == by_partition[r.partition]
        assert records[0] in own and records[-1] in own
    assert ranges[1].start_offset > 0  # the foreign record came first
    assert len(_records(client, ranges[1])) > by_partition[1]  # foreign records inside


def _records(client, r: ChangelogRange) -> list:
    consumer = Consumer({**client, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start_offset)])
        out: list = []
        deadline = time.monotonic() + 10
        while not out or out[-1].offset() < r.end_offset - 1:
            assert time.monotonic() < deadline, f"{r} not readable"
            out.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
        return [m for m in out if m.offset() < r.end_offset]
    finally:
        consumer.close()


def test_persist_up_to_a_mark_ignores_later_appends(make_topic, make_writer) -> None:
    topic = make_topic(2)
    writer = make_writer(topic, 2)
    for n in range(10):
        writer.append(change(0, n))
    mark = writer.next_sequence_number()
    for n in range(10, 25):
        writer.append(change(0, n))
    (early,) = writer.persist(mark, CheckpointId(1))
    (late,) = writer.persist(writer.next_sequence_number(), CheckpointId(2))
    assert early.end_offset - early.start_offset == 10
    assert (late.start_offset, late.end_offset - late.start_offset) == (early.start_offset, 25)


def test_reset_after_abort_keeps_the_changes_in_the_next_ranges(make_topic, make_writer) -> None:
    topic = make_topic(1)
    writer = make_writer(topic, 1)
    for n in range(5):
        writer.append(change(3, n))
    (aborted,) = writer.persist(writer.next_sequence_number(), CheckpointId(1))
    assert writer.reset(CheckpointId(1)) and not writer.reset(CheckpointId(1))
    assert not writer.confirm(CheckpointId(1))  # an aborted checkpoint is never confirmed
    for n in range(5, 8):
        writer.append(change(3, n))
    (next_range,) = writer.persist(writer.next_sequence_number(), CheckpointId(2))
    assert next_range.start_offset == aborted.start_offset
    assert next_range.end_offset == aborted.end_offset + 3
    assert writer.confirmed is None
    assert writer.confirm(CheckpointId(2)) and not writer.confirm(CheckpointId(2))
    assert writer.confirmed is not None and writer.confirmed[0] == 2


def test_confirm_subsumes_older_pending_checkpoints(make_topic, make_writer) -> None:
    writer = make_writer(make_topic(1), 1)
    writer.append(change(1, 1))
    writer.persist(writer.next_sequence_number(), CheckpointId(1))
    writer.append(change(1, 2))
    writer.persist(writer.next_sequence_number(), CheckpointId(2))
    assert writer.confirm(CheckpointId(2))
    assert not writer.confirm(CheckpointId(1))


def test_truncate_moves_the_start_and_only_up_to_the_confirmed_mark(make_topic, make_writer) -> None:
    topic = make_topic(2)
    writer = make_writer(topic, 2)
    for n in range(6):
        writer.append(change(0, n))
    first = writer.next_sequence_number()
    (r1,) = writer.persist(first, CheckpointId(1))
    for n in range(6, 9):
        writer.append(change(0, n))
        writer.append(change(100, n))  # partition 1: only after the first mark
    second = writer.next_sequence_number()
    with pytest.raises(ValueError):
        writer.truncate(first)  # checkpoint 1 is not confirmed yet
    writer.confirm(CheckpointId(1))
    writer.truncate(first)
    assert writer.truncation_point == first
    ranges = writer.persist(second, CheckpointId(2))
    assert [(r.partition, r.end_offset - r.start_offset) for r in ranges] == [(0, 3), (1, 3)]
    assert ranges[0].start_offset == r1.end_offset
    with pytest.raises(ValueError):
        writer.persist(ORIGIN, CheckpointId(3))  # before the truncation point
    with pytest.raises(ValueError):
        writer.truncate(second)  # checkpoint 2 is pending, not confirmed
    writer.truncate(ORIGIN)  # an older truncation is a no-op
    assert writer.persist(second, CheckpointId(4)) == ranges


def test_writer_and_reader_survive_the_short_high_watermark(make_topic, make_writer, make_reader,
                                                           client) -> None:
    """Large batches: the broker may report a high watermark short of the real end; the ranges
    come from delivery reports and are exact anyway, and the reader reads up to their end."""
    topic = make_topic(1)
    writer = make_writer(topic, 1, linger_ms=50)
    for n in range(5000):
        writer.append(change(7, n))
    (r,) = writer.persist(writer.next_sequence_number(), CheckpointId(1))
    assert r.end_offset - r.start_offset == 5000
    assert read_offsets(client, topic, 0, r.end_offset) == list(range(r.start_offset, r.end_offset))
    consumer = Consumer({**client, "group.id": "unused"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)
    finally:
        consumer.close()
    assert high <= r.end_offset  # short on the embedded broker, exact on Apache Kafka
    read = list(make_reader(1).read([ChangelogSource(KeyGroupRange(0, MAX_P - 1), (), (r,))],
                                    KeyGroupRange(0, 127)))
    assert [int.from_bytes(c.value, "big") for c in read] == list(range(5000))


def test_missing_topic_and_wrong_partition_count_fail_fast(make_topic, make_writer, unique_name) -> None:
    with pytest.raises(ChangelogWriteError, match="partitions"):
        make_writer(make_topic(2), 3)
    with pytest.raises(ChangelogWriteError, match="does not exist"):
        make_writer(unique_name("absent"), 1, persist_timeout_s=2.0)


def test_closed_writer_refuses_appends(make_topic, make_writer) -> None:
    writer = make_writer(make_topic(1), 1)
    writer.append(change(0, 0))
    writer.close()
    writer.close()
    with pytest.raises(RuntimeError, match="closed"):
        writer.append(change(0, 1))
