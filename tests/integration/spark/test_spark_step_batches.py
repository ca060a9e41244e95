"""A stage's Spark steps on real micro-batch DataFrames (:mod:`tidemark.spark.spark_step`): the
checks at the start, each refusal in one line; the collected batch (rows, rejected rows with their
original bytes, plain topics beside stepped ones); a step failing in its own logic."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tidemark.api import SparkStep
from tidemark.examples.access_log import PARSE_RECORD
from tidemark.runtime.job.records import stepped_records
from tidemark.spark.arrow import SOURCE_SCHEMA
from tidemark.spark.spark_step import REJECTED, SparkStepError, StageSteps, batch_ends

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _frame(spark, rows):  # noqa: ANN001
    """A micro-batch as the source gives it: (topic, partition, offset, value[, headers])."""
    return spark.createDataFrame(
        [(topic, partition, offset, T0 + dt.timedelta(seconds=offset), b"k", value, headers)
         for topic, partition, offset, value, *rest in rows for headers in [rest[0] if rest else None]],
        SOURCE_SCHEMA)


def _record(url, status=200) -> bytes:  # noqa: ANN001
    return json.dumps({"ts": 1, "ip": "10.0.0.1", "method": "GET", "url": url, "status": status, "bytes": 5}).encode()


@pytest.mark.parametrize(("step", "refusal"), [
    (SparkStep(lambda df: df.select("topic", "partition", "value")), "drops offset: keep topic, partition and offset"),
    (SparkStep(lambda df: df.withColumn("value", df["value"].cast("string"))), "changes column value to string"),
    (SparkStep("SELECT topic, partition, offset FROM input"), "keeps neither value nor a column of its own"),
    (SparkStep(lambda df: df, required=("nope",)), "its required columns) fails"),
    (SparkStep("SELEC nothing"), "the Spark step of input in fails: "),
    (SparkStep(lambda df: 42), "returns int, not a DataFrame"),
    (SparkStep(lambda df: df.withColumn(REJECTED, df["offset"])), "has a column _tidemark_rejected"),
    (SparkStep(lambda df: df, tables={"t": lambda spark: 1 / 0}), "the Spark step of table 't' fails: division by zero"),
])
def test_a_step_that_cannot_run_is_refused_at_the_start_in_one_line(spark, step, refusal) -> None:  # noqa: ANN001
    with pytest.raises(SparkStepError) as refused:
        StageSteps("s", {"in": step}, ("in",)).prepare(spark)
    message = str(refused.value)
    assert refusal in message and message.startswith("stage s: ") and "\n" not in message, message


def test_a_batch_is_parsed_by_spark_and_unparsable_rows_carry_their_required_columns(spark) -> None:  # noqa: ANN001
    steps = StageSteps("counts", {"in": PARSE_RECORD}, ("in",))
    steps.prepare(spark)
    frame = _frame(spark, [("in", 0, 5, _record("/a")), ("in", 1, 7, b"not json"), ("in", 0, 6, _record("/b", 404))])
    batch = steps.collect(frame, 0, None)
    assert batch.plain is None and batch.ends is None
    [stepped] = batch.stepped
    assert stepped.row_columns == ("ts", "ip", "method", "url", "status", "bytes")
    records = {r.offset: r for r in stepped_records(stepped.table, stepped.row_columns, REJECTED, stepped.originals)}
    assert records[5].row == {"ts": 1, "ip": "10.0.0.1", "method": "GET", "url": "/a", "status": 200, "bytes": 5}
    assert records[6].row["status"] == 404 and records[6].step_rejected is None
    assert records[7].step_rejected == "url,ts" and records[7].value == b"not json"
    assert records[5].timestamp_ms == int((T0 + dt.timedelta(seconds=5)).timestamp() * 1000)


def test_rows_a_step_keeps_without_value_are_dead_lettered_with_the_original_bytes_and_plain_topics_pass(
        spark) -> None:  # noqa: ANN001
    """A step that drops ``value``: its rejected rows' original columns are looked up in the batch;
    the rows of a topic without a step come as the source gives them; each stepped topic sees only
    its own rows."""
    only_urls = SparkStep(lambda df: df.select("topic", "partition", "offset",
                                               df["value"].cast("string").alias("text"),
                                               (df["value"].cast("string") != "bad").alias("ok"))
                          .where("text != 'skip'").selectExpr("*", "IF(ok, text, NULL) AS good"),
                          required=("good",))
    steps = StageSteps("s", {"in": only_urls}, ("in", "channel"))
    steps.prepare(spark)
    frame = _frame(spark, [("in", 0, 1, b"one"), ("in", 0, 2, b"bad", [{"key": "h", "value": b"v"}]),
                           ("in", 0, 3, b"skip"), ("channel", 0, 9, b"raw")])
    batch = steps.collect(frame, 0, None)
    assert [r["value"] for r in batch.plain.to_pylist()] == [b"raw"]
    [stepped] = batch.stepped
    records = list(stepped_records(stepped.table, stepped.row_columns, REJECTED, stepped.originals))
    assert [(r.offset, r.row["text"]) for r in records] == [(1, "one"), (2, "bad")]  # 3 filtered by the step
    assert records[0].value is None and records[0].step_rejected is None
    assert (records[1].step_rejected, records[1].value, records[1].key) == ("good", b"bad", b"k")
    assert records[1].raw_headers() == {"h": b"v"}


def test_a_step_failing_in_its_own_logic_fails_in_one_line_and_a_batch_ends_where_the_offset_log_says(
        spark, tmp_path) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    @F.udf("string")
    def strict(value: bytes) -> str:
        raise ValueError(f"cannot read {value!r}")

    steps = StageSteps("s", {"in": SparkStep(lambda df: df.withColumn("v", strict("value")))}, ("in",))
    steps.prepare(spark)  # the schema is fine: the failure comes with the data
    with pytest.raises(SparkStepError) as failed:
        steps.collect(_frame(spark, [("in", 0, 1, b"x")]), 0, None)
    assert "cannot read b'x'" in str(failed.value) and "\n" not in str(failed.value), failed.value

    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text('v1\n{"batchWatermarkMs":0}\n{"in":{"0":12,"1":4}}\n')
    assert batch_ends(str(tmp_path), 3) == {("in", 0): 12, ("in", 1): 4}
    assert batch_ends(str(tmp_path), 4) is None


def test_the_harness_runs_a_stages_step_in_spark_and_its_function_on_the_rows(spark, tmp_path) -> None:  # noqa: ANN001
    """How a job author tests a stage with a step: the worked example's step on a few records,
    then its function on the rows."""
    from tidemark.examples.owner_errors import owner_errors, write_owners_csv
    from tidemark.testing.harness import KeyedProcessFunctionHarness

    owners = str(write_owners_csv(tmp_path / "owners.csv", {"/a": "web"}))
    with KeyedProcessFunctionHarness.for_stage(owner_errors(owners), "owner_errors") as harness:
        with pytest.raises(ValueError, match="input access-log of stage owner_errors has a Spark step: run it with "
                                             r"spark_step_rows\(spark, records\) and process the rows"):
            harness.process_record(None, _record("/a", 500))
        rows = harness.spark_step_rows(spark, [_record("/a", 500), _record("/a", 200), _record("/b", 404),
                                               b"{broken", (b"k", _record("/a", 503))])
        assert rows == [{"url": "/a", "status": 500, "owner": "web"}, {"url": "/b", "status": 404, "owner": "nobody"},
                        {"url": "/a", "status": 503, "owner": "web"}]
        assert harness.step_rejected == [(b"{broken", "url")]
        harness.process_all(rows)
        assert harness.output_values()[-1] == {"owner": "web", "errors": 2}


def test_a_step_must_keep_the_timestamp_when_it_is_the_event_time(spark) -> None:  # noqa: ANN001
    drops = SparkStep("SELECT topic, partition, offset, value FROM input")
    StageSteps("s", {"in": drops}, ("in",)).prepare(spark)  # event time from the values, or none
    with pytest.raises(SparkStepError, match=r"^stage s: the Spark step of input in drops timestamp, the records' "
                                             r"event time \(the stage's EventTime has no timestamp function\)"):
        StageSteps("s", {"in": drops}, ("in",), timestamped=frozenset({"in"})).prepare(spark)
