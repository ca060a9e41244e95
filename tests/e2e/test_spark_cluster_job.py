"""A whole job whose stage worker's Spark runs on a Spark standalone cluster (``spark.master``).

The one-stage count per URL runs on the local pipeline with ``TIDEMARK_SPARK__MASTER`` naming the
cluster of the ``spark_cluster`` fixture, with a Spark step (``cluster_jobs.located_counts``) that
parses each record and notes the process that computed its row. What shows the step ran on the
cluster's executor: every row was computed by a Python worker of an executor JVM that the
cluster's Spark worker launched for the stage's application (not the stage worker's process or its
driver JVM), while the master listed the application running with the worker's core; the
executor's log shows the tasks (and, with Spark's connector, the Kafka consumer of the job's input). The keyed counting stayed
in the stage worker (docs/concepts/what-runs-where.md), and the output is exactly once.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from pipeline_support import stage_pids, topics_for

from tidemark.examples.generator import generate, produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import LocalPipeline
from tidemark.local.quick_start import QUICK_START_SPARK_CONF

pytestmark = [pytest.mark.e2e]

EXECUTOR_CONF = {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.cores.max": "1",
                 "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


@pytest.mark.parametrize("source", ["kafka", "tidemark-kafka"])
def test_a_jobs_spark_step_runs_on_a_standalone_clusters_executor_and_its_output_is_exactly_once(
        source, tmp_path, kafka_bootstrap, unique_name, spark_cluster) -> None:
    """With either Kafka source: Spark's connector, or Tidemark's Python data source (whose
    reads run in the executor's Python workers)."""
    topics = topics_for(unique_name)
    records = list(generate(300))
    here = str(Path(__file__).resolve().parent)  # the job's module, for the workers and the executors
    env = {"TIDEMARK_SPARK__MASTER": spark_cluster.master_url, "TIDEMARK_SPARK__SOURCE": source, "PYTHONPATH": here,
           "TIDEMARK_SPARK__CONF": json.dumps({**QUICK_START_SPARK_CONF, **EXECUTOR_CONF,
                                               "spark.executorEnv.PYTHONPATH": here})}
    with LocalPipeline(tmp_path / "home", kafka_bootstrap, topic_prefix=unique_name("tm"), standby=False,
                       env=env) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job("cluster_jobs:located_counts", topics.single_stage_args())
        produce(kafka_bootstrap, topics.input, records, 4, chunk=100)
        output = read_committed(kafka_bootstrap, topics.output, expect=len(records), timeout_s=120)
        running = spark_cluster.master_state()["activeapps"]
        worker_pids = set(stage_pids(pipe.home).values())
        log_text = job.log_path.read_text(errors="replace")
    expected = Counter(json.loads(r)["url"] for r in records)
    hits: dict[str, list[int]] = {}
    for value in output:
        hits.setdefault(value["url"], []).append(value["hits"])
    assert hits == {url: list(range(1, n + 1)) for url, n in expected.items()}, log_text[-3000:]
    [app] = [app for app in running if app["name"] == "tidemark-count_hits"]
    assert app["state"] == "RUNNING" and app["cores"] == 1, app
    # every row computed in a Python worker of the executor the cluster's worker launched for the app
    computed_in = {(v["pid"], v["executor_jvm"], v["executor_parent"], v["app_id"]) for v in output}
    assert worker_pids and computed_in
    for pid, executor_jvm, executor_parent, app_id in computed_in:
        assert executor_jvm > 0 and executor_parent == spark_cluster.worker.pid, computed_in
        assert app_id == app["id"] and pid not in worker_pids and executor_jvm not in worker_pids
    executor_logs = list((spark_cluster.work_dir / app["id"]).glob("*/stderr"))
    assert executor_logs, f"no executor of {app['id']} on the cluster's worker"
    executor_log = "\n".join(path.read_text(errors="replace") for path in executor_logs)
    assert re.search(r"Finished task \S+ in stage", executor_log)
    if source == "kafka":
        assert topics.input in executor_log, "the executor's Kafka consumer read the job's input"
