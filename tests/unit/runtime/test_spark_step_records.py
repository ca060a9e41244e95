"""The runtime's side of a Spark step (``SparkStep``): a row the step made is the function's value
(never decoded again), keyed by a column; a row with a null required column is dead-lettered; a
batch's end offsets move the positions past the records the step filtered out; through the
exchange, the reader runs the step and forwards its rows; a step on a channel is refused in one
line; the API's checks."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
from types import SimpleNamespace

import pyarrow as pa
import pytest

from record_paths import record_path
from tidemark.api import EventTime, Input, JobSpec, KeyedProcessFunction, SparkStep, Stage
from tidemark.runtime.job.records import InputRecord, stepped_records
from tidemark.runtime.job.physical_plan import physical_job
from tidemark.runtime.worker.bootstrap import read_steps
from tidemark.runtime.worker.inputs import SourceInput
from tidemark.runtime.worker.routing import KeyPartitioner
from tidemark.runtime.worker.query import micro_batch_ends
from tidemark.spark.spark_step import REJECTED, MicroBatch, SteppedRows
from tidemark.types import TopicPartition

pytestmark = pytest.mark.unit

PARSE = SparkStep("SELECT topic, partition, offset, value, r.* FROM input", required=("url",))


class _Echo(KeyedProcessFunction):
    def process(self, value, ctx) -> None:  # noqa: ANN001
        ctx.emit(ctx.key, value)


class _Keep(KeyedProcessFunction):
    seen: list = []

    def process(self, value, ctx) -> None:  # noqa: ANN001
        self.seen.append((ctx.key, value))


def _stepped_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary()),
        ("url", pa.string()), ("status", pa.int32()), (REJECTED, pa.string())]))


def test_a_steps_rows_reach_the_function_as_dicts_keyed_by_a_column_and_rejected_rows_are_dead_lettered(
        tmp_path) -> None:
    stage = Stage("s", ("in",), "url", _Echo, "out", spark_step=PARSE)
    path, tasks, failures = record_path(stage, tmp_path)
    table = _stepped_table([
        {"topic": "in", "partition": 0, "offset": 4, "value": b"{...}", "url": "/a", "status": 200, REJECTED: ""},
        {"topic": "in", "partition": 1, "offset": 9, "value": b"garbage", "url": None, "status": None,
         REJECTED: "url"}])
    records = list(stepped_records(table.take([1, 0]), ("url", "status"), REJECTED))  # in partition order
    assert records[0].row == {"url": "/a", "status": 200} and records[0].step_rejected is None
    positions: dict = {}
    source = SourceInput(path, positions, lambda: None)
    batch = MicroBatch(stepped=[SteppedRows(table, ("url", "status"))], ends={TopicPartition("in", 0): 12})
    source.feed(records, SimpleNamespace(finished=False), ends=micro_batch_ends(batch))
    assert [(k, json.loads(v)) for t in tasks for k, v, _ in t.take_output()] == [
        (b"/a", {"url": "/a", "status": 200})]  # the row as it is: the stage's JSON decode never ran
    ((record, error),) = failures.failed
    assert (record.offset, record.value, error.reason) == (9, b"garbage", "spark-step-rejected")
    assert "the Spark step gave no value for url" in str(error)
    # past what the step filtered out in partition 0 (offsets 5..11), and no further back in 1
    assert positions == {("in", 0): 12, ("in", 1): 10}


def test_a_steps_rows_become_records_column_by_column_over_every_chunk() -> None:
    """The usual batch (no headers, nothing to look up) takes the columnar path; a row with headers
    is checked one by one; both give each record its origin, time, bytes, row and null columns."""
    first = _stepped_table([
        {"topic": "in", "partition": 0, "offset": 1, "value": b"a", "url": "/a", "status": 200, REJECTED: ""},
        {"topic": "in", "partition": 1, "offset": 2, "value": b"b", "url": None, "status": 404, REJECTED: "url"}])
    second = _stepped_table([
        {"topic": "in", "partition": 2, "offset": 3, "value": b"c", "url": "/c", "status": None, REJECTED: ""}])
    table = pa.concat_tables([first, second])
    stamps = pa.array([1_000_000, None, 5_000_999], pa.timestamp("us", tz="UTC"))
    table = table.append_column("timestamp", stamps)
    assert table.column("url").num_chunks == 2
    records = list(stepped_records(table, ("url", "status"), REJECTED))
    assert [(r.topic, r.partition, r.offset, r.timestamp_ms, r.value, r.row, r.step_rejected, r.headers)
            for r in records] == [
        ("in", 0, 1, 1000, b"a", {"url": "/a", "status": 200}, None, None),
        ("in", 1, 2, 0, b"b", {"url": None, "status": 404}, "url", None),
        ("in", 2, 3, 5000, b"c", {"url": "/c", "status": None}, None, None)]
    assert [r.row for r in stepped_records(table, (), REJECTED)] == [None, None, None]
    headers = pa.array([[], [{"key": "tidemark-epoch", "value": b"x"}], None],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    with_headers = list(stepped_records(table.append_column("headers", headers), ("url",), REJECTED))
    assert [r.row for r in with_headers] == [{"url": "/a"}, {"url": None}, {"url": "/c"}]
    assert with_headers[1].header_error == "header tidemark-epoch is not a decimal epoch: b'x'"
    assert with_headers[0].header_error is None and with_headers[1].step_rejected == "url"


def test_a_row_the_function_cannot_key_is_malformed_input_with_its_origin(tmp_path) -> None:
    stage = Stage("s", ("in",), "url", _Echo, "out", spark_step=PARSE)
    path, _, failures = record_path(stage, tmp_path)
    path.process(InputRecord("in", 0, 3, 0, None, b"raw", row={"status": 200}))
    ((record, error),) = failures.failed
    assert (record.offset, error.reason) == (3, "malformed-input") and "KeyError: 'url'" in str(error)


def test_a_step_that_only_filters_leaves_the_record_to_the_stages_decode(tmp_path) -> None:
    stage = Stage("s", ("in",), "url", _Echo, "out", spark_step=SparkStep("SELECT * FROM input WHERE offset > 1"))
    path, tasks, _ = record_path(stage, tmp_path)
    path.process(InputRecord("in", 0, 3, 0, None, b'{"url": "/b"}'))  # no row: decoded as JSON
    assert [json.loads(v) for t in tasks for _, v, _ in t.take_output()] == [{"url": "/b"}]


def _runner(stage: Stage, source: bool = True) -> SimpleNamespace:
    kind = SourceInput if source else object
    return SimpleNamespace(stage=stage, input=kind.__new__(kind))


def test_the_steps_of_a_workers_query_are_its_input_topics_not_its_channels() -> None:
    stage = Stage("s", ("a", Input("b", spark_step=PARSE), "c"), "url", _Echo, "out",
                  spark_step=SparkStep("SELECT *, 1 AS one FROM input"))
    steps = read_steps(_runner(stage))
    assert steps.steps == {"a": stage.spark_step, "b": PARSE, "c": stage.spark_step} and steps.plain_topics == ()
    assert not read_steps(_runner(Stage("s", ("a", "b"), "url", _Echo, "out")))
    assert not read_steps(_runner(stage, source=False))  # a channel stage: its topics are channels
    assert steps.timestamped == frozenset()
    kafka_time = Stage("s", ("a", Input("b", event_time=EventTime(lambda v: v["ts"]))), "url", _Echo, "out",
                       spark_step=PARSE, event_time=EventTime())
    assert read_steps(_runner(kafka_time)).timestamped == {"a"}  # b's event time comes from its values


def test_through_the_exchange_the_reader_runs_the_step_and_forwards_its_rows_which_the_stage_keys(tmp_path) -> None:
    """Keyed on two workers: the exchange reader's query runs the step; it forwards each row in the
    tagged codec (with what a Spark row holds besides JSON's types), and the stage decodes it."""
    spec = JobSpec("j", (Stage("s", ("in",), "url", _Echo, "out", spark_step=PARSE),), workers=2)
    reader, stage = physical_job(spec, {"s": 2}, lambda name: f"x.exchange.{name}").stages
    assert reader.forwards_to == "s" and reader.input_list[0].spark_step is PARSE
    assert read_steps(_runner(reader)).steps == {"in": PARSE}
    assert not read_steps(_runner(stage, source=False))
    path, tasks, _ = record_path(reader, tmp_path / "reader")
    row = {"url": "/a", "at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), "day": dt.date(2026, 1, 1),
           "price": decimal.Decimal("9.90"), "tags": [("k", 1)]}
    forward = path.forwarder(KeyPartitioner(128, 4))
    forward(InputRecord("in", 0, 7, 5, b"key", b"raw bytes", row=row))
    [(key, value, stamp, partition, origin)] = [out for t in tasks for out in t.output]
    assert (key, stamp, partition, origin) == (b"key", 5, KeyPartitioner(128, 4).of_key("/a"), "in")
    keyed, keyed_tasks, failures = record_path(dataclasses.replace(stage, function=_Keep), tmp_path / "stage")
    keyed.process(InputRecord("x.exchange.s", partition, 0, 5, key, value, origin="in"))
    assert failures.failed == [] and _Keep.seen == [("/a", row)]


def test_the_api_checks_a_step_and_a_key_column() -> None:
    with pytest.raises(ValueError, match="the SQL query is empty"):
        SparkStep("  ")
    with pytest.raises(ValueError, match="transform is a function of a DataFrame or a SQL query, got int"):
        SparkStep(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a table's name is a SQL identifier other than 'input', got 'input'"):
        SparkStep("SELECT 1", tables={"input": lambda spark: None})
    assert SparkStep("SELECT 1", required="url").required == ("url",)
    assert SparkStep("SELECT 1", tables={"b": len, "a": len}).tables == (("a", len), ("b", len))
    with pytest.raises(ValueError, match="stage s: key_by names a column, got an empty name"):
        Stage("s", ("in",), "", _Echo, "out")
    stage = Stage("s", (Input("in", key_by="owner"),), None, _Echo, "out")
    assert stage.keyed and stage.key_of(stage.input_list[0])({"owner": "web"}) == "web"
    upstream = Stage("first", ("in",), "url", _Echo, "mid")
    with pytest.raises(ValueError, match="stage second: a Spark step runs on the job's input topics, and mid is stage "
                                         "first's output: give that stage the step instead"):
        JobSpec("j", (upstream, Stage("second", (Input("mid", spark_step=PARSE),), "url", _Echo, "out")))
