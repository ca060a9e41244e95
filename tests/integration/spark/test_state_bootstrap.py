"""Bootstrapping a savepoint from a DataFrame on a local SparkSession: one Spark partition per new
task, each written by an executor; every row read back by the reader, as a harness restores it;
a record value from several columns; a missing column fails on the driver, writing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tidemark.spark.state_bootstrap import bootstrap_dataframe
from tidemark.state import AvroSerializer, ValueStateDescriptor
from tidemark.state_processor import StateReader, WriteOptionError
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.testing import KeyedProcessFunctionHarness as Harness
from tidemark.testing.harness import HarnessSnapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark
HITS = ValueStateDescriptor("hits", default=0)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_each_task_is_written_by_an_executor_and_reads_back_as_the_table(spark: "SparkSession", tmp_path,
                                                                        backend: str) -> None:
    from tidemark.examples.access_log import url_counts

    df = spark.createDataFrame([(f"/page/{i}", i) for i in range(300)], "url STRING, hits BIGINT").repartition(5)
    written, tasks = bootstrap_dataframe(df, storage_url=tmp_path.as_uri(), job="access-log-counts",
                                         stage="count_hits", descriptor=HITS, key="url", value="hits",
                                         parallelism=3, max_parallelism=128, backend=backend)
    assert sorted(t.snapshot.task_id for t in tasks) == ["count_hits#0", "count_hits#1", "count_hits#2"]
    assert sum(t.rows for t in tasks) == 300 and all(t.peak_rss_kib > 0 for t in tasks)
    storage = FilesystemCheckpointStorage(tmp_path)
    rows = list(StateReader.open(storage, "access-log-counts", path=written.path).read("count_hits", "hits"))
    assert {r.key: r.value for r in rows} == {f"/page/{i}": i for i in range(300)}
    assert {r.task for r in rows} == {"count_hits#0", "count_hits#1", "count_hits#2"}
    job = url_counts(state_backend=backend)
    h = Harness.for_stage(job, "count_hits", parallelism=2, storage=storage)
    with h.restore(HarnessSnapshot(storage, written.path, written.metadata)):
        h.process({"url": "/page/7", "ip": "10.0.0.1", "ts": 0, "method": "GET", "status": 200, "bytes": 1})
        assert h.output_values()[-1] == {"url": "/page/7", "hits": 8}


def test_several_value_columns_make_a_record(spark: "SparkSession", tmp_path) -> None:
    schema = {"type": "record", "name": "Visits", "fields": [{"name": "hits", "type": "long"},
                                                             {"name": "last", "type": "string"}]}
    visits = ValueStateDescriptor("visits", serializer=AvroSerializer(schema))
    df = spark.createDataFrame([("10.0.0.1", 3, "/a"), ("10.0.0.2", 5, "/b")], "ip STRING, hits BIGINT, last STRING")
    written, _ = bootstrap_dataframe(df, storage_url=tmp_path.as_uri(), job="sessions", stage="ip_sessions",
                                     descriptor=visits, key="ip", value=["hits", "last"], parallelism=1,
                                     max_parallelism=16)
    reader = StateReader.open(FilesystemCheckpointStorage(tmp_path), "sessions", path=written.path)
    assert {r.key: r.value for r in reader.read("ip_sessions", "visits")} == {
        "10.0.0.1": {"hits": 3, "last": "/a"}, "10.0.0.2": {"hits": 5, "last": "/b"}}


def test_a_missing_column_fails_on_the_driver_writing_nothing(spark: "SparkSession", tmp_path) -> None:
    df = spark.createDataFrame([("/a", 1)], "url STRING, hits BIGINT")
    with pytest.raises(WriteOptionError, match="the DataFrame has no column 'count'; its columns: url, hits"):
        bootstrap_dataframe(df, storage_url=tmp_path.as_uri(), job="access-log-counts", stage="count_hits",
                            descriptor=HITS, key="url", value="count", parallelism=1, max_parallelism=128)
    assert not any(tmp_path.iterdir())
