"""A source batch becomes records column by column: timestamps in epoch milliseconds, headers only
where the batch has any."""

import datetime as dt

import pyarrow as pa

from tidemark.runtime.job.records import (
    EPOCH_HEADER,
    EVENT_TIME_HEADER,
    INPUT_HEADER,
    TASK_HEADER,
    WATERMARK_HEADER,
    batch_ends,
    records_of,
    tidemark_headers,
    watermark_headers,
)
from tidemark.runtime.worker.watermarks import WatermarkStatus
from tidemark.types import Epoch, TaskId, TopicPartition

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(stamps, headers):
    n = len(stamps)
    return pa.table({
        "topic": pa.array(["in"] * n), "partition": pa.array(list(range(n)), pa.int32()),
        "offset": pa.array([10 + i for i in range(n)], pa.int64()),
        "timestamp": pa.array(stamps, pa.timestamp("us", tz="UTC")),
        "key": pa.array([None] * n, pa.binary()), "value": pa.array([b"v%d" % i for i in range(n)], pa.binary()),
        "headers": pa.array(headers, HEADERS)})


def test_timestamps_are_epoch_milliseconds_and_a_batch_without_headers_has_none():
    stamps = [dt.datetime(2026, 11, 24, 4, 0, 0, 123_456, tzinfo=dt.timezone.utc), None,
              dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)]
    records = list(records_of(_batch(stamps, [[], None, []])))
    assert [r.timestamp_ms for r in records] == [int(stamps[0].timestamp() * 1000), 0, 1000]
    assert [(r.partition, r.offset, r.value) for r in records] == [(0, 10, b"v0"), (1, 11, b"v1"), (2, 12, b"v2")]
    assert all(r.headers is None and r.epoch is None and r.header_error is None for r in records)


def test_channel_headers_are_read_where_the_batch_has_them():
    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    headers = [[{"key": EPOCH_HEADER, "value": b"3"}, {"key": TASK_HEADER, "value": b"op#0"}], []]
    first, second = records_of(_batch([now, now], headers))
    assert (first.epoch, first.task, first.header_error) == (3, "op#0", None)
    assert second.epoch is None and not second.headers


def test_an_empty_batch_has_no_records():
    assert list(records_of(_batch([], []))) == []


def test_watermark_and_event_time_headers_are_read_and_checked():
    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    channel = [{"key": EPOCH_HEADER, "value": b"3"}, {"key": TASK_HEADER, "value": b"op#0"}]
    headers = [channel + [{"key": WATERMARK_HEADER, "value": b"-5"}],
               channel + [{"key": WATERMARK_HEADER, "value": b"1700000000000;idle"}],
               channel + [{"key": EVENT_TIME_HEADER, "value": b"1700000000123"}],
               channel + [{"key": WATERMARK_HEADER, "value": b"12x"}],
               channel + [{"key": EVENT_TIME_HEADER, "value": b"99999999999999999999"}]]
    plain, idle, timed, bad, huge = records_of(_batch([now] * 5, headers))
    assert plain.watermark == WatermarkStatus(-5) and plain.header_error is None
    assert idle.watermark == WatermarkStatus(1_700_000_000_000, idle=True)
    assert timed.event_time_ms == 1_700_000_000_123 and timed.watermark is None
    assert bad.header_error and "not a time" in bad.header_error and bad.watermark is None
    assert huge.header_error


def test_watermark_headers_round_trip():
    status = WatermarkStatus(-(2**63), idle=True)
    headers = [{"key": k, "value": v} for k, v in watermark_headers(Epoch(2), TaskId("op#1"), status)]
    assert tidemark_headers(headers) == (2, "op#1", None, status, None, None)


def test_a_forwarded_records_input_topic_is_read_and_checked():
    now = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
    channel = [{"key": EPOCH_HEADER, "value": b"1"}, {"key": TASK_HEADER, "value": b"s.read#0"}]
    headers = [channel + [{"key": INPUT_HEADER, "value": b"orders"}],
               channel + [{"key": INPUT_HEADER, "value": b""}],
               channel + [{"key": INPUT_HEADER, "value": b"x" * 250}]]
    named, empty, long = records_of(_batch([now] * 3, headers))
    assert named.origin == "orders" and named.header_error is None
    assert empty.header_error and "not a topic" in empty.header_error
    assert long.header_error and "not a topic" in long.header_error


def test_a_batch_ends_after_its_highest_offset_in_each_partition():
    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
    table = pa.table({
        "topic": pa.array(["a", "a", "b", "a"]), "partition": pa.array([0, 1, 0, 0], pa.int32()),
        "offset": pa.array([7, 3, 40, 9], pa.int64()), "timestamp": pa.array([now] * 4, pa.timestamp("us", tz="UTC")),
        "key": pa.array([None] * 4, pa.binary()), "value": pa.array([b"v"] * 4, pa.binary()),
        "headers": pa.array([[]] * 4, HEADERS)})
    ends = batch_ends(table)
    assert ends == {("a", 0): 10, ("a", 1): 4, ("b", 0): 41}
    assert all(isinstance(tp, TopicPartition) for tp in ends)
    assert batch_ends(table.to_batches()[0]) == ends
    assert batch_ends(_batch([], [])) == {}
