"""The ``tidemark-state`` data source on a local SparkSession: one input partition per old task,
every key's value as the harness wrote it, queried with Spark SQL; the other views; a wrong stage or
state fails on the driver; the CLI's Parquet output."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tidemark.api import KeyedProcessFunction
from tidemark.spark.state_source import FORMAT, register, write_parquet
from tidemark.state import AvroSerializer, DataclassSerializer, ListStateDescriptor, ValueStateDescriptor
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.testing import KeyedProcessFunctionHarness as Harness

from state_processor_stage import COUNT, harness, keyed_state_of, request

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark
KEYS = [f"10.0.0.{i}" for i in range(17)]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict]:
    root = tmp_path_factory.mktemp("checkpoints")
    with harness("rocksdb", 3, storage=FilesystemCheckpointStorage(root)) as h:
        h.process_all(request(i) for i in range(60))
        h.snapshot(checkpoint_id=5, savepoint=False)
        state = keyed_state_of(h, KEYS)
    return root.as_uri(), state


def test_a_state_reads_one_partition_per_old_task_and_answers_spark_sql(spark: "SparkSession", written) -> None:
    storage, state = written
    register(spark)
    frame = (spark.read.format(FORMAT)
             .options(storage=storage, job="profiles", checkpoint="5", stage="profile", state="count").load())
    assert frame.rdd.getNumPartitions() == 3
    assert {json.loads(r.key): json.loads(r.value) for r in frame.collect()} == state[COUNT.name]
    ranges = (spark.read.format(FORMAT).options(storage=storage, job="profiles", checkpoint="5", stage="profile",
                                                state="count", key_groups_per_partition="16").load())
    assert ranges.rdd.getNumPartitions() == 9  # 43, 43 and 42 key groups, 16 at most a partition
    assert sorted(ranges.collect()) == sorted(frame.collect())
    frame.createOrReplaceTempView("counts")
    top = spark.sql("SELECT get_json_object(key, '$') AS ip, CAST(value AS BIGINT) AS n FROM counts "
                    "ORDER BY n DESC, ip LIMIT 1").collect()[0]
    best = max(state["count"].items(), key=lambda kv: (kv[1], [-ord(c) for c in kv[0]]))
    assert (top.ip, top.n) == best
    methods = spark.read.format(FORMAT).options(storage=storage, job="profiles", checkpoint="5", stage="profile",
                                                state="by_method").load()
    assert {(json.loads(r.key), json.loads(r.user_key)): json.loads(r.value) for r in methods.collect()} == {
        (key, method): n for key, by in state["by_method"].items() for method, n in by.items()}


def test_the_other_views_and_wrong_options(spark: "SparkSession", written) -> None:
    storage, _ = written
    register(spark)

    def load(**options: str):
        return spark.read.format(FORMAT).options(storage=storage, job="profiles", checkpoint="5", **options).load()

    assert load(view="timers", stage="profile").count() == 60
    assert sorted(r.value for r in load(view="operator_state", stage="profile").collect()) == sorted(
        json.dumps(request(i)["ip"]) for i in range(60))
    metadata = load(view="metadata").collect()
    assert [(r.task, r.key_group_start) for r in metadata] == [("profile#0", 0), ("profile#1", 43), ("profile#2", 86)]
    assert all(r.handles.startswith("incremental") and r.shared_files > 0 for r in metadata)
    with pytest.raises(Exception, match="has no keyed state 'nope'"):
        load(stage="profile", state="nope").collect()
    with pytest.raises(Exception, match="has no stage 'nope'"):
        load(stage="nope", state="count").collect()


def test_state_read_writes_parquet_through_spark(spark: "SparkSession", written, tmp_path: Path) -> None:
    storage, state = written
    output = tmp_path / "count.parquet"
    count = write_parquet({"storage": storage, "job": "profiles", "checkpoint": "5", "stage": "profile",
                            "state": "count"}, output, spark)
    import pyarrow.parquet as pq

    table = pq.read_table(output)
    assert count == table.num_rows == len(state["count"])
    assert {json.loads(k): json.loads(v) for k, v in zip(table["key"].to_pylist(), table["value"].to_pylist())} == \
        state["count"]


@dataclass
class Visit:
    url: str
    hits: int
    tags: list[str]


VISIT = ValueStateDescriptor("visit", serializer=DataclassSerializer(Visit))
SIZES = ListStateDescriptor("sizes", serializer=AvroSerializer({"type": "record", "name": "Size", "fields": [
    {"name": "bytes", "type": "long"}, {"name": "note", "type": ["null", "string"]}]}))


class Visits(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.visit = ctx.get_state(VISIT)
        self.sizes = ctx.get_state(SIZES)

    def process(self, value: Any, ctx: Any) -> None:
        old = self.visit.value()
        self.visit.update(Visit(ctx.key, (old.hits if old else 0) + 1, [value["method"]]))
        self.sizes.add({"bytes": value["bytes"], "note": None})


def test_a_state_with_an_avro_schema_has_a_typed_value_column(spark: "SparkSession", tmp_path: Path) -> None:
    register(spark)
    h = Harness.for_function(Visits, lambda v: v["ip"], name="visits", parallelism=2, job_id="visits",
                             storage=FilesystemCheckpointStorage(tmp_path))
    with h:
        h.process_all(request(i) for i in range(30))
        h.snapshot(checkpoint_id=1)

    def load(state: str, **options: str):
        return spark.read.format(FORMAT).options(storage=tmp_path.as_uri(), job="visits", checkpoint="1",
                                                 stage="visits", state=state, **options).load()

    visits = load("visit")
    assert visits.schema["value"].dataType.simpleString() == "struct<url:string,hits:bigint,tags:array<string>>"
    spark_rows = visits.selectExpr("get_json_object(key, '$') AS ip", "value.hits AS hits").collect()
    assert {r.ip: r.hits for r in spark_rows} == {f"10.0.0.{i}": len(range(i, 30, 17)) for i in range(17)}
    sizes = load("sizes")
    assert sizes.schema["value"].dataType.simpleString() == "array<struct<bytes:bigint,note:string>>"
    assert sum(s.bytes for r in sizes.collect() for s in r.value) == sum(10 * i for i in range(30))
    as_json = load("visit", typed_values="false").collect()
    assert {json.loads(r.value)["url"] for r in as_json} == {f"10.0.0.{i}" for i in range(17)}
