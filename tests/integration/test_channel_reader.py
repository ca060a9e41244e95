"""A fused worker's channel reader against a real broker: it reads its partitions from the lane's
positions (else the earliest), committed records only, each with what Tidemark's headers carry
(or why they are malformed), and hands them over in order; a hand-over that raises ends it with
that error (the lane's loop then fails the attempt); ``stop`` ends it."""

from __future__ import annotations

import threading

import pytest
from kafka_test_helpers import create_topic, produce_transaction

from tidemark.local.pipeline import wait_for
from tidemark.runtime.job.records import EPOCH_HEADER, InputRecord, channel_headers
from tidemark.runtime.worker.channel_reader import ChannelReader
from tidemark.spark.stage_source import ReadSelection
from tidemark.types import Epoch, TaskId, TopicPartition

pytestmark = pytest.mark.integration


def test_reads_committed_records_from_the_positions_with_their_headers(kafka_bootstrap, unique_name) -> None:
    client = {"bootstrap.servers": kafka_bootstrap}
    topic = unique_name("exchange")
    create_topic(kafka_bootstrap, topic, 3)
    tagged = channel_headers(Epoch(2), TaskId("s.read#0"))
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"a0", tagged), (0, None, b"a1", tagged),
                                                 (1, None, b"b0", tagged), (2, None, b"not mine", tagged)])
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"aborted", tagged), (1, None, b"aborted", tagged)],
                        commit=False)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"a2", tagged), (1, None, b"b1", [(EPOCH_HEADER, b"x")])])
    got: list[InputRecord] = []
    selection = ReadSelection((topic,), (TopicPartition(topic, 0), TopicPartition(topic, 1)), assigned=True,
                              positions={TopicPartition(topic, 0): 1})  # partition 1: from the earliest
    reader = ChannelReader(client, selection, got.extend, "s").start()
    try:
        wait_for(lambda: len(got) >= 4, 30, "the committed records")
        assert reader.isActive
    finally:
        reader.stop()
    assert not reader.isActive and reader.exception() is None
    by_partition = {p: [r for r in got if r.partition == p] for p in (0, 1)}
    assert [r.value for r in by_partition[0]] == [b"a1", b"a2"]
    assert [r.value for r in by_partition[1]] == [b"b0", b"b1"]
    assert by_partition[0][0].offset == 1 and by_partition[0][0].timestamp_ms > 0
    first = by_partition[0][0]
    assert (first.epoch, first.task, first.header_error) == (Epoch(2), TaskId("s.read#0"), None)
    assert first.raw_headers() == dict(tagged)  # kept for a dead letter
    malformed = by_partition[1][1]
    assert malformed.epoch is None and "tidemark-epoch" in (malformed.header_error or "")
    assert reader.starting_offsets() == {topic: {"0": 1, "1": -2}}


def test_a_hand_over_that_raises_ends_the_reader_with_its_error(kafka_bootstrap, unique_name) -> None:
    client = {"bootstrap.servers": kafka_bootstrap}
    topic = unique_name("exchange")
    create_topic(kafka_bootstrap, topic, 1)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"v", None)])
    failed = threading.Event()

    def hand_over(records: list[InputRecord]) -> None:
        failed.set()
        raise ValueError("the batch before failed")

    reader = ChannelReader(client, ReadSelection((topic,), (TopicPartition(topic, 0),), assigned=True),
                           hand_over, "s").start()
    wait_for(lambda: failed.is_set() and not reader.isActive, 30, "the reader ended")
    assert isinstance(reader.exception(), ValueError)
    reader.stop()  # after the end: nothing to wait for
