"""Poison records: bounded dead letters, Tidemark header validation, the stage error policy."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from tidemark.protocol import codec
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.protocol.messages import Barrier
from tidemark.api import ErrorPolicy
from tidemark.runtime.job.metrics import RECORDS_SKIPPED
from tidemark.runtime.job.records import BARRIER_HEADER, EPOCH_HEADER, TASK_HEADER, InputRecord, records_of
from tidemark.runtime.worker.record_errors import FunctionFailed, RecordFailed, RecordFailures
from tidemark.kafka.topics import TopicNames
from tidemark.chassis.dead_letter_publisher import RawRecord, dead_letter, error_text, published_size, reason_of
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, TaskId

LIMIT = 1_000_000


def raw(value: bytes | None, key: bytes | None = b"k", headers: dict[str, bytes] | None = None) -> RawRecord:
    return RawRecord("access-log", 3, 41, 1_700_000_000_000, key, value, headers or {})


def test_a_dead_letter_of_a_value_near_one_megabyte_fits_the_broker_and_records_size_and_digest():
    value = b'{"url": ' + b"x" * 999_000  # malformed JSON of almost 1 MB
    letter = dead_letter(raw(value), ValueError("Expecting value: line 1 column 9 " + "y" * 10_000), "worker", LIMIT)
    assert published_size(letter) <= LIMIT
    assert len(codec.encode(letter)) < LIMIT
    assert letter.original_sizes == {"value": len(value)}
    assert letter.original_sha256 == {"value": hashlib.sha256(value).hexdigest()}
    assert value.startswith(letter.value) and len(letter.value) > 900_000  # as much as fits is kept
    assert len(letter.error_message) <= 2000 and letter.error_message.endswith("(10033 characters)")
    back = codec.decode(codec.encode(letter))
    assert back == letter and (back.origin_topic, back.origin_partition, back.origin_offset) == ("access-log", 3, 41)


def test_key_and_headers_are_cut_too_when_the_value_alone_is_not_enough():
    letter = dead_letter(raw(b"v" * 10, key=b"k" * 600_000, headers={"h": b"z" * 600_000}), ValueError("x"),
                         "worker", LIMIT)
    assert published_size(letter) <= LIMIT
    assert "value" not in letter.original_sizes and letter.value == b"v" * 10
    assert letter.original_sizes["key"] == 600_000 and len(letter.key) < 600_000


def test_a_small_dead_letter_is_kept_whole():
    letter = dead_letter(raw(b"{bad", headers={"a": b"1"}), ValueError("bad"), "worker", LIMIT)
    assert (letter.value, letter.key, letter.headers, letter.original_sizes) == (b"{bad", b"k", {"a": b"1"}, {})


def test_error_text_with_lone_surrogates_is_encodable_and_bounded():
    text = error_text(UnicodeEncodeError("utf-8", "\ud800/cart", 0, 1, "surrogates not allowed"))
    text.encode("utf-8")  # no UnicodeEncodeError
    letter = dead_letter(raw(b'{"url": "\\ud800"}'), ValueError("key '\udc80' has no UTF-8 bytes"), "worker")
    assert "\\udc80" in codec.decode(codec.encode(letter)).error_message


SOURCE_ROWS = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us")), ("key", pa.binary()), ("value", pa.binary()),
    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
])


def _table(headers: list[list[tuple[str, bytes | None]] | None]) -> pa.Table:
    rows = len(headers)
    return pa.Table.from_pydict({
        "topic": ["ch"] * rows, "partition": [0] * rows, "offset": list(range(rows)),
        "timestamp": [None] * rows, "key": [None] * rows, "value": [b"{}"] * rows,
        "headers": [None if h is None else [{"key": k, "value": v} for k, v in h] for h in headers],
    }, schema=SOURCE_ROWS)


def test_malformed_tidemark_headers_mark_the_record_instead_of_raising():
    good_barrier = codec.encode(Barrier(JobId("j"), CheckpointId(1), CheckpointType.CHECKPOINT,
                                        CheckpointingMode.EXACTLY_ONCE, TaskId("up#0"), 0, Epoch(2)))
    cases = [
        [(EPOCH_HEADER, b"2"), (TASK_HEADER, b"up#0")],  # fine
        [(EPOCH_HEADER, b"2"), (TASK_HEADER, b"up#0"), (BARRIER_HEADER, good_barrier)],  # fine barrier
        [(EPOCH_HEADER, b"\xff\xfe garbage")],
        [(EPOCH_HEADER, b"-1")],
        [(EPOCH_HEADER, None)],
        [(TASK_HEADER, b"\xed\xa0\x80")],  # a lone surrogate, as surrogatepass encodes it
        [(TASK_HEADER, b"")],
        [(BARRIER_HEADER, b"\x00\x00\x00\x00\x01garbage")],
        [(BARRIER_HEADER, codec.encode(DeadLetter("t", 0, 0, None, None, None)))],
        [(EPOCH_HEADER, b"2"), (EPOCH_HEADER, b"3")],
        [("user-header", b"\xff anything goes")],  # not Tidemark's: never looked at
        None,
    ]
    records = list(records_of(_table(cases)))
    errors = [r.header_error for r in records]
    assert errors[0] is None and records[0].epoch == 2 and records[0].task == "up#0"
    assert errors[1] is None and records[1].barrier is not None
    for index in range(2, 10):
        assert errors[index] is not None, cases[index]
        assert records[index].epoch is None and records[index].barrier is None
    assert "appears more than once" in errors[9]
    assert errors[10] is None and errors[11] is None
    assert records[2].raw_headers() == {EPOCH_HEADER: b"\xff\xfe garbage"}


def test_fail_policy_raises_naming_the_origin_and_skip_counts_without_publishing():
    record = InputRecord("access-log", 1, 7, 0, None, b"{}")
    error = FunctionFailed("RuntimeError: boom")
    assert reason_of(error) == "function-failed"
    client = {"bootstrap.servers": "127.0.0.1:9"}  # never contacted: nothing is produced
    failing = RecordFailures(client, TopicNames("tm"), "job", ErrorPolicy.FAIL, LIMIT)
    with pytest.raises(RecordFailed, match=r"access-log/1@7: function-failed: RuntimeError: boom"):
        failing.record_failed(record, error)
    skipping = RecordFailures(client, TopicNames("tm"), "job", ErrorPolicy.SKIP, LIMIT)
    counted = RECORDS_SKIPPED.labels("job", "access-log", "function-failed")
    before = counted._value.get()
    skipping.record_failed(record, error)
    assert skipping.failed == 1 and counted._value.get() == before + 1
