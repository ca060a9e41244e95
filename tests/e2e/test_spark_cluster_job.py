"""A whole job whose stage worker's Spark runs on a Spark standalone cluster (``spark.master``).

The one-stage access-log job runs on the local pipeline with ``TIDEMARK_SPARK__MASTER`` naming the
cluster of the ``spark_cluster`` fixture: its output is exactly once as in local mode, the master
lists the stage worker's Spark application with the worker's core, and the application's executor
on the cluster's worker ran the tasks and the Kafka consumer of the job's input (its log). The
stage's keyed processing stayed in the stage worker process (docs/concepts/what-runs-where.md).
"""

from __future__ import annotations

import json
import re

import pytest
from pipeline_support import URL_COUNTS, topics_for, verify_single_stage

from tidemark.examples.generator import generate, produce
from tidemark.local.pipeline import LocalPipeline
from tidemark.local.quick_start import QUICK_START_SPARK_CONF

pytestmark = [pytest.mark.e2e]

EXECUTOR_CONF = {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.cores.max": "1",
                 "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


def test_a_job_whose_spark_runs_on_a_standalone_cluster_writes_its_output_exactly_once(
        tmp_path, kafka_bootstrap, unique_name, spark_cluster) -> None:
    topics = topics_for(unique_name)
    records = list(generate(300))
    env = {"TIDEMARK_SPARK__MASTER": spark_cluster.master_url,
           "TIDEMARK_SPARK__CONF": json.dumps({**QUICK_START_SPARK_CONF, **EXECUTOR_CONF})}
    with LocalPipeline(tmp_path / "home", kafka_bootstrap, topic_prefix=unique_name("tm"), standby=False,
                       env=env) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(URL_COUNTS, topics.single_stage_args(workers=1))
        produce(kafka_bootstrap, topics.input, records, 4, chunk=100)
        verdict = verify_single_stage(kafka_bootstrap, topics, records, timeout_s=120)
        running = spark_cluster.master_state()["activeapps"]
        log_text = job.log_path.read_text(errors="replace")
    assert verdict.exactly_once, (verdict, log_text[-3000:])
    [app] = [app for app in running if app["name"] == "tidemark-count_hits"]
    assert app["state"] == "RUNNING" and app["cores"] == 1, app
    executor_logs = list((spark_cluster.work_dir / app["id"]).glob("*/stderr"))
    assert executor_logs, f"no executor of {app['id']} on the cluster's worker"
    executor_log = "\n".join(path.read_text(errors="replace") for path in executor_logs)
    assert re.search(r"Finished task \S+ in stage", executor_log)
    assert topics.input in executor_log, "the executor's Kafka consumer read the job's input"
