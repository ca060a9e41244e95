"""A stage worker's Spark session on a Spark standalone cluster (``spark.master: spark://...``).

The session is made as a stage worker makes it (``session_options`` over settings read from the
environment, ``TIDEMARK_SPARK__MASTER`` naming the cluster of the ``spark_cluster`` fixture) in a
process of its own, as a worker's is, and runs a stage's streaming query: the stage's Kafka source
over the session's broker, ``foreachBatch``, a DataFrame transformation before ``toArrow`` (where a
stage's Spark step goes). The transformation is a ``mapInArrow`` whose Python function notes the
process it runs in and that process's executor JVM (its ancestor running
``CoarseGrainedExecutorBackend``). What shows the work ran on the cluster's executor, not in the
driver: every row was computed by a Python worker of an executor JVM that the cluster's Spark
worker started for this application, while the master listed the application running with the
worker's core; and the executor's own log shows the tasks, and for Spark's connector the Kafka
consumer of the topic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kafka_test_helpers import create_topic, produce_transaction

from tidemark.jvm import QUICK_START_JVM_OPTIONS

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SOURCES = ("kafka", "tidemark-kafka")
EXECUTOR_CONF = {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.cores.max": "1",
                 "spark.executor.extraJavaOptions": QUICK_START_JVM_OPTIONS}

STAGE_QUERY_ON_CLUSTER = r"""
import json, os, sys, threading, time, urllib.request

from tidemark.config.settings import TidemarkSettings, load_settings
from tidemark.runtime.worker.query import session_options
from tidemark.spark.session import query_checkpoint_location, spark_session
from tidemark.spark.stage_source import ReadSelection, stage_source

topic, partitions, expect, master_ui = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
settings = load_settings(TidemarkSettings)
source = stage_source(settings)
spark = spark_session(session_options(settings, "tidemark-cluster-stage", source))
source.prepare(spark)


def where_computed(batches):
    # runs in a Spark Python worker: its pid, and the executor JVM it serves (an ancestor process)
    import os
    import pyarrow as pa

    def parent(pid):
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])

    def cmdline(pid):
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read().decode(errors="replace").split("\0")

    jvm, args = os.getpid(), []
    while jvm > 1 and "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in args:
        jvm = parent(jvm)
        args = cmdline(jvm)
    found = jvm > 1
    executor = args[args.index("--executor-id") + 1] if found else ""
    app = args[args.index("--app-id") + 1] if found else ""
    launcher = parent(jvm) if found else 0
    for batch in batches:
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [batch.column(0), pa.array([os.getpid()] * n, pa.int64()), pa.array([jvm if found else 0] * n, pa.int64()),
             pa.array([launcher] * n, pa.int64()), pa.array([executor] * n), pa.array([app] * n)],
            ["value", "pid", "executor_jvm", "executor_parent", "executor_id", "app_id"])


rows, running = [], []
lock = threading.Lock()


def on_batch(frame, batch_id):
    table = frame.select("value").mapInArrow(
        where_computed, "value binary, pid long, executor_jvm long, executor_parent long, executor_id string, "
                        "app_id string").toArrow()
    if table.num_rows and not running:  # the application as the master lists it while it runs
        with urllib.request.urlopen(master_ui + "/json/", timeout=5) as response:
            running.append(json.loads(response.read()))
    with lock:
        rows.extend(table.to_pylist())


selection = ReadSelection((topic,), tuple((topic, p) for p in range(partitions)), assigned=True)
with query_checkpoint_location("cluster-stage") as location:
    query = (spark.readStream.format(source.format).options(**source.options(selection)).load().writeStream
             .foreachBatch(on_batch).option("checkpointLocation", location)
             .trigger(processingTime=f"{settings.spark.trigger_ms} milliseconds").start())
    deadline = time.monotonic() + 60
    while len(rows) < expect and time.monotonic() < deadline and query.exception() is None:
        time.sleep(0.1)
    query.stop()
print(json.dumps({
    "driver_pid": os.getpid(),
    "driver_jvm": spark._jvm.java.lang.ProcessHandle.current().pid(),
    "app_id": spark.sparkContext.applicationId,
    "master": spark.sparkContext.master,
    "rows": [{**row, "value": row["value"].decode()} for row in rows],
    "master_state": running[0] if running else None,
}))
spark.stop()
"""


def _run_stage_query(cluster, bootstrap: str, kind: str, topic: str, partitions: int, expect: int) -> dict:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "TIDEMARK_SPARK__MASTER": cluster.master_url,
           "TIDEMARK_SPARK__SOURCE": kind, "TIDEMARK_SPARK__CONF": json.dumps(EXECUTOR_CONF),
           "TIDEMARK_SPARK__JAVA_OPTIONS": QUICK_START_JVM_OPTIONS}
    result = subprocess.run([sys.executable, "-c", STAGE_QUERY_ON_CLUSTER, topic, str(partitions), str(expect),
                             cluster.master_ui], capture_output=True, text=True, timeout=150, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", SOURCES)
def test_a_stage_query_on_a_cluster_master_reads_and_transforms_on_the_clusters_executor(
        kind, spark_cluster, kafka_bootstrap, unique_name) -> None:
    topic = unique_name("cluster-in")
    create_topic(kafka_bootstrap, topic, 2)
    values = [f"v{i}" for i in range(20)]
    produce_transaction(kafka_bootstrap, topic, [(i % 2, None, value.encode(), None) for i, value in enumerate(values)])

    run = _run_stage_query(spark_cluster, kafka_bootstrap, kind, topic, partitions=2, expect=len(values))

    assert run["master"] == spark_cluster.master_url
    assert sorted(row["value"] for row in run["rows"]) == sorted(values), "every record, once"
    # computed in Python workers of the executor JVM the cluster's worker started for this application
    computed_in = {(row["pid"], row["executor_jvm"], row["executor_parent"], row["executor_id"], row["app_id"])
                   for row in run["rows"]}
    for pid, executor_jvm, executor_parent, executor_id, app_id in computed_in:
        assert executor_jvm > 0, "the rows were computed outside any executor JVM"
        assert pid != run["driver_pid"] and executor_jvm != run["driver_jvm"]
        assert executor_parent == spark_cluster.worker.pid, "an executor the cluster's Spark worker launched"
        assert app_id == run["app_id"]
    # the master had granted the application the worker's core while it ran
    apps = {app["id"]: app for app in run["master_state"]["activeapps"]}
    assert apps[run["app_id"]]["state"] == "RUNNING" and apps[run["app_id"]]["cores"] == 1
    # the executor's log shows the tasks (and the connector's consumer of the topic) ran there
    executor_id = next(iter(computed_in))[3]
    log = spark_cluster.executor_log(run["app_id"], executor_id)
    assert "Finished task" in log
    if kind == "kafka":
        assert topic in log, "the executor's Kafka consumer read the topic"
