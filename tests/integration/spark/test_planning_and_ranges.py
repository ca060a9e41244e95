"""Offset model, options, planning and range reads as plain Python (no Spark), on a real broker."""

from __future__ import annotations

import time

import pytest
from broker_gaps import tansu_gap
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from tidemark.kafka.metadata import TopicNotFoundError, metadata_consumer
from tidemark.kafka.range_reader import RangeNotReachedError
from tidemark.protocol.messages import SourceOffset
from tidemark.spark.offsets import OffsetFormatError, OffsetRange, PartitionOffsets, StartingOffsets, StartKind
from tidemark.spark.options import InvalidOptionError, KafkaSinkOptions, KafkaSourceOptions
from tidemark.spark.offset_planning import fair_budget, plan_latest, plan_ranges, resolve_starting, source_partitions
from tidemark.spark.arrow_range_reader import read_range
from tidemark.local.pipeline import wait_for

from kafka_test_helpers import create_topic, produce_transaction

pytestmark = pytest.mark.integration


def _read_offsets(bootstrap: str, r: OffsetRange, **kwargs) -> list[int]:
    return [o for batch in read_range({"bootstrap.servers": bootstrap}, r, **kwargs)
            for o in batch.column("offset").to_pylist()]


# ----------------------------------------------------------------------------- offsets and options


def test_offsets_json_round_trip_and_protocol_form():
    offsets = PartitionOffsets.from_json('{"b": {"1": 7, "0": 3}, "a": {"0": 0}}')
    assert offsets.to_json() == {"a": {"0": 0}, "b": {"0": 3, "1": 7}}
    assert PartitionOffsets.from_json(offsets.to_json()) == offsets
    assert offsets.to_source_offsets() == (SourceOffset("a", 0, 0), SourceOffset("b", 0, 3), SourceOffset("b", 1, 7))
    for bad in ('{"a": 1}', '{"a": {"x": 1}}', '{"a": {"0": -3}}', "[1]", "{nope", '{"a": {"0": true}}'):
        with pytest.raises(OffsetFormatError):
            PartitionOffsets.from_json(bad)


def test_starting_offsets_forms():
    assert StartingOffsets.parse("Earliest").kind is StartKind.EARLIEST
    assert StartingOffsets.parse("latest").kind is StartKind.LATEST
    specific = StartingOffsets.parse('{"t": {"0": 5, "1": -2}}')
    assert specific.kind is StartKind.SPECIFIC and specific.specific[("t", 1)] == -2


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "x"}, "subscribe"),
        ({"kafka.bootstrap.servers": "x", "subscribe": " , "}, "subscribe"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "startingOffsets": "yesterday"}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "startingOffsets": '{"u": {"0": 1}}'}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "maxRecordsPerTrigger": "ten"}, "maxRecordsPerTrigger"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "isolationLevel": "dirty"}, "isolationLevel"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id"),
        ({"kafka.bootstrap.servers": "x", "subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets"),
    ],
)
def test_bad_source_option_names_the_option(options, named):
    with pytest.raises(InvalidOptionError) as info:
        KafkaSourceOptions.parse(options)
    assert info.value.option.lower() == named.lower()
    assert named.lower() in str(info.value).lower()


def test_source_options_pass_kafka_client_settings_through():
    parsed = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a, b",
                                       "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
                                       "maxRecordsPerTrigger": "50"})
    assert parsed.topics == ("a", "b")
    assert parsed.client == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}
    assert parsed.max_records_per_trigger == 50 and parsed.starting.kind is StartKind.LATEST
    assert KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribe": "a"},
                                    streaming=False).starting.kind is StartKind.EARLIEST


def test_bad_sink_option_names_the_option():
    with pytest.raises(InvalidOptionError, match="commitMarkerTopic"):
        KafkaSinkOptions.parse({"kafka.bootstrap.servers": "x", "topic": "t", "commitMarkerTopic": "t"})
    with pytest.raises(InvalidOptionError, match="kafka.transactional.id"):
        KafkaSinkOptions.parse({"kafka.bootstrap.servers": "x", "kafka.transactional.id": "mine"})


# ----------------------------------------------------------------------------- admission control


def test_fair_budget_spreads_evenly_and_reuses_unused_shares():
    backlog = {("t", 0): 100, ("t", 1): 3, ("t", 2): 100}
    grant = fair_budget(backlog, 60)
    assert sum(grant.values()) == 60
    assert grant[("t", 1)] == 3 and abs(grant[("t", 0)] - grant[("t", 2)]) <= 1
    assert fair_budget(backlog, 1000) == backlog
    small = fair_budget({("t", 0): 5, ("t", 1): 5, ("t", 2): 5}, 2)
    assert sum(small.values()) == 2 and all(v <= 1 for v in small.values())
    assert fair_budget({("t", 0): 0}, 10) == {("t", 0): 0}


# ----------------------------------------------------------------------------- planning on a broker


def test_plan_latest_resolves_and_plans_partitions_missing_from_start(kafka_bootstrap, unique_name):
    topic = unique_name("plan")
    create_topic(kafka_bootstrap, topic, 2)
    produce_transaction(kafka_bootstrap, topic, [(p, None, b"x", None) for p in (0, 0, 1)])
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    try:
        start = resolve_starting(consumer, [topic], StartingOffsets.parse("earliest"))
        assert start.to_json() == {topic: {"0": 0, "1": 0}}
        latest = resolve_starting(consumer, [topic], StartingOffsets.parse("latest"))
        end = plan_latest(consumer, [topic], start)
        assert end == latest and end[(topic, 0)] >= 2 and end[(topic, 1)] >= 1
        limited = plan_latest(consumer, [topic], start, max_records=2)
        assert sum(limited[k] - start[k] for k in limited) == 2
        assert plan_latest(consumer, [topic], end) == end  # nothing new: no progress, never backwards
        capped = plan_latest(consumer, [topic], start, cap=PartitionOffsets.of([((topic, 0), 1)]))
        assert capped.to_json() == {topic: {"0": 1, "1": 0}}  # AvailableNow: nothing past the cap

        partial = PartitionOffsets.of([((topic, 0), end[(topic, 0)])])  # partition 1 unknown to start
        planned = plan_latest(consumer, [topic], partial)
        assert planned == end
        assert OffsetRange(topic, 1, 0, end[(topic, 1)]) in plan_ranges(consumer, partial, planned)
        with pytest.raises(TopicNotFoundError, match="subscribe"):
            plan_latest(consumer, [unique_name("missing")], end)
    finally:
        consumer.close()


def test_assigned_partitions_are_the_only_ones_resolved_and_planned(kafka_bootstrap, unique_name):
    topic = unique_name("plan-assign")
    create_topic(kafka_bootstrap, topic, 3)
    produce_transaction(kafka_bootstrap, topic, [(p, None, b"x", None) for p in (0, 1, 1, 2)])
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    assigned = frozenset({(topic, 1), (topic, 2)})
    try:
        assert source_partitions(consumer, [topic], assigned) == [(topic, 1), (topic, 2)]
        assert source_partitions(consumer, [topic]) == [(topic, 0), (topic, 1), (topic, 2)]
        start = resolve_starting(consumer, [topic], StartingOffsets.parse("earliest"), assigned=assigned)
        assert start.to_json() == {topic: {"1": 0, "2": 0}}
        every = plan_latest(consumer, [topic], PartitionOffsets())
        end = plan_latest(consumer, [topic], every.merged(start), assigned=assigned)  # partition 0 is dropped
        assert end.to_json() == {topic: {"1": every[(topic, 1)], "2": every[(topic, 2)]}}
        assert [(r.partition, r.start) for r in plan_ranges(consumer, start, end)] == [(1, 0), (2, 0)]
        with pytest.raises(TopicNotFoundError, match=rf"option 'assign': partition\(s\) not found: \['{topic}/5'\]"):
            plan_latest(consumer, [topic], start, assigned=assigned | {(topic, 5)})
        missing = unique_name("missing")
        with pytest.raises(TopicNotFoundError, match=rf"option 'assign': topic\(s\) not found: \['{missing}'\]"):
            resolve_starting(consumer, [missing], StartingOffsets.parse("earliest"), assigned={(missing, 0)})
    finally:
        consumer.close()


@tansu_gap("CreatePartitions")
def test_partitions_added_to_a_topic_appear_in_later_offsets(kafka_bootstrap, unique_name):
    topic = unique_name("grow")
    create_topic(kafka_bootstrap, topic, 1)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"x", None)])
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    try:
        end = plan_latest(consumer, [topic], PartitionOffsets())
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(15)
        produce_transaction(kafka_bootstrap, topic, [(1, None, b"new", None)])
        deadline = time.monotonic() + 15
        grown = plan_latest(consumer, [topic], end)
        while grown.get((topic, 1), 0) < 1 and time.monotonic() < deadline:  # the new partition, its record visible
            time.sleep(0.5)
            grown = plan_latest(consumer, [topic], end)
        assert grown[(topic, 1)] >= 1 and grown[(topic, 0)] == end[(topic, 0)]
        ranges = plan_ranges(consumer, end, grown)
        assert ranges == [OffsetRange(topic, 1, 0, grown[(topic, 1)])]
        assert _read_offsets(kafka_bootstrap, ranges[0]) == [0]
    finally:
        consumer.close()


# ----------------------------------------------------------------------------- range reads


def test_read_range_stops_exactly_at_planned_end_across_transaction_markers(kafka_bootstrap, unique_name):
    topic = unique_name("rr")
    create_topic(kafka_bootstrap, topic, 1)
    for txn in range(3):  # 4 records + 1 commit marker per transaction
        produce_transaction(kafka_bootstrap, topic, [(0, b"k", f"{txn}-{i}".encode(), None) for i in range(4)])
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    end = plan_latest(consumer, [topic], PartitionOffsets())[(topic, 0)]
    consumer.close()
    everything = _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, 0, end))
    assert len(everything) == 12 and everything == sorted(everything)
    assert everything[-1] < end - 1  # the last offset is a commit marker, not a record
    cut = everything[5]
    head = _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, 0, cut))
    tail = _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, cut, end))
    assert head + tail == everything  # no gap, no duplicate at the cut
    # a range that holds only a commit marker terminates promptly with no rows
    began = time.monotonic()
    assert _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, end - 1, end), idle_timeout_s=5) == []
    assert time.monotonic() - began < 5


def test_read_range_empty_is_immediate_and_unreachable_end_is_bounded(kafka_bootstrap, unique_name):
    began = time.monotonic()
    assert list(read_range({"bootstrap.servers": "127.0.0.1:1"}, OffsetRange("none", 0, 5, 5))) == []
    assert time.monotonic() - began < 0.5  # no broker contact at all
    topic = unique_name("gap")
    create_topic(kafka_bootstrap, topic, 1)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"x", None)])
    with pytest.raises(RangeNotReachedError, match="did not reach the planned end 50"):
        _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, 0, 50), idle_timeout_s=1.5)


def test_read_range_builds_headers_and_timestamps(kafka_bootstrap, unique_name):
    topic = unique_name("hdr")
    create_topic(kafka_bootstrap, topic, 1)
    headers = [("a", b"1"), ("a", b"2"), ("tidemark-barrier", b"\x00\x01")]
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"v", headers), (0, b"k", b"w", None)])
    batches = list(read_range({"bootstrap.servers": kafka_bootstrap}, OffsetRange(topic, 0, 0, 3)))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [r["value"] for r in rows] == [b"v", b"w"]
    assert rows[0]["headers"] == [{"key": k, "value": v} for k, v in headers]
    assert rows[1]["headers"] is None and rows[1]["key"] == b"k" and rows[0]["key"] is None
    assert rows[0]["timestamp"] is not None and rows[0]["topic"] == topic and rows[0]["partition"] == 0


@tansu_gap("aborted-transaction filtering for read_committed readers")
def test_read_range_skips_aborted_transactions(kafka_bootstrap, unique_name):
    topic = unique_name("abort")
    create_topic(kafka_bootstrap, topic, 1)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"c1", None)])
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"aborted", None)] * 3, commit=False)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"c2", None)])
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    end = plan_latest(consumer, [topic], PartitionOffsets())[(topic, 0)]
    consumer.close()
    values = [v for b in read_range({"bootstrap.servers": kafka_bootstrap}, OffsetRange(topic, 0, 0, end))
              for v in b.column("value").to_pylist()]
    assert values == [b"c1", b"c2"]


def test_a_short_reported_end_delays_records_but_never_loses_or_repeats_them(kafka_bootstrap, unique_name):
    """Non-transactional batched produce: Tansu reports the end short; Apache Kafka exactly. Either way
    the planned offsets are read exactly once."""
    topic = unique_name("short")
    create_topic(kafka_bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 50})
    for i in range(100):
        producer.produce(topic, value=f"plain-{i}".encode(), partition=0)
    producer.flush(10)
    consumer = metadata_consumer({"bootstrap.servers": kafka_bootstrap})
    try:
        first_end = plan_latest(consumer, [topic], PartitionOffsets())
        first = _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, 0, first_end[(topic, 0)]))
        assert first == list(range(first_end[(topic, 0)]))  # exactly the planned offsets, even if short
        produce_transaction(kafka_bootstrap, topic, [(0, None, b"tx", None)])  # the end is exact after a commit
        # the commit returns before its marker is written (the coordinator writes markers after it
        # answers), so the read_committed end reaches the record a moment later
        second_end = wait_for(lambda: (end := plan_latest(consumer, [topic], first_end))[(topic, 0)] > 100 and end,
                              10, "the read_committed end past the transaction", poll_s=0.05)
        second = _read_offsets(kafka_bootstrap, OffsetRange(topic, 0, first_end[(topic, 0)], second_end[(topic, 0)]))
    finally:
        consumer.close()
    assert first + second == list(range(101))
