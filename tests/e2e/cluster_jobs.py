"""A job for the Spark-cluster test: the count per URL whose Spark step parses each record and
notes where Spark computed its row (the Python worker's pid, the executor JVM it serves, that JVM's
parent, the application), read from ``/proc`` in the process that ran it."""

from __future__ import annotations

from typing import Any

from tidemark.api import JobSpec, KeyedProcessFunction, SparkStep, Stage
from tidemark.examples.access_log import RECORD_SCHEMA
from tidemark.state import ValueStateDescriptor
from tidemark.types import JobId

EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
LOCATED = ("topic string, partition int, offset long, timestamp timestamp, value binary, url string, pid long, "
           "executor_jvm long, executor_parent long, app_id string")


def where_computed(batches: Any) -> Any:
    """``mapInArrow``: each row with the process that computed it (runs in a Spark Python worker)."""
    import os

    import pyarrow as pa

    def parent(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])

    def cmdline(pid: int) -> list[str]:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().decode(errors="replace").split("\0")

    jvm, args = os.getpid(), []
    while jvm > 1 and EXECUTOR not in args:
        jvm = parent(jvm)
        args = cmdline(jvm)
    found = jvm > 1
    app = args[args.index("--app-id") + 1] if found else ""
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array([os.getpid()] * n, pa.int64()), pa.array([jvm if found else 0] * n, pa.int64()),
             pa.array([parent(jvm) if found else 0] * n, pa.int64()), pa.array([app] * n)],
            [*batch.schema.names, "pid", "executor_jvm", "executor_parent", "app_id"])


def _parse_and_locate(frame: Any) -> Any:
    from pyspark.sql import functions as F

    parsed = frame.select("topic", "partition", "offset", "timestamp", "value",
                          F.from_json(F.col("value").cast("string"), RECORD_SCHEMA)["url"].alias("url"))
    return parsed.mapInArrow(where_computed, LOCATED)


class CountWhere(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        hits = self.hits.value() + 1
        self.hits.update(hits)
        ctx.emit(ctx.key, {"url": ctx.key, "hits": hits, **{k: value[k] for k in
                                                            ("pid", "executor_jvm", "executor_parent", "app_id")}})


def located_counts(job_id: str, input_topic: str, output_topic: str) -> JobSpec:
    return JobSpec(JobId(job_id), (Stage("count_hits", (input_topic,), "url", CountWhere, output_topic,
                                         spark_step=SparkStep(_parse_and_locate, required=("url",))),))
