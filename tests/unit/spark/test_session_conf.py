"""The Spark configuration of a stage worker's session (``tidemark.spark.session.spark_conf``) as
its settings make it (``tidemark.runtime.worker.query.session_options``): where its tasks run,
where the driver binds, and the user's configuration last."""

from __future__ import annotations

import json

import pytest

from tidemark.config.settings import TidemarkSettings, load_settings
from tidemark.runtime.worker.query import session_options
from tidemark.spark.session import SessionOptions, spark_conf
from tidemark.spark.stage_source import SparkKafkaSource, TidemarkKafkaSource


def _worker_conf(monkeypatch: pytest.MonkeyPatch, **variables: str) -> dict[str, str]:
    for name, value in variables.items():
        monkeypatch.setenv(f"TIDEMARK_SPARK__{name.upper()}", value)
    monkeypatch.setenv("TIDEMARK_SPARK__CLASS_ARCHIVE", "false")
    options = session_options(load_settings(TidemarkSettings), "tidemark-s", SparkKafkaSource("b:9092", {}, ["/j/a.jar"]))
    return spark_conf(options)


def test_a_worker_runs_its_tasks_in_local_mode_on_the_loopback_by_default(monkeypatch) -> None:
    conf = _worker_conf(monkeypatch)
    assert conf["spark.master"] == "local[2]" and conf["spark.default.parallelism"] == "2"
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.jars"] == "/j/a.jar"  # the connector's jars, which Spark ships to executors too


def test_a_cluster_master_leaves_the_parallelism_to_the_executors_cores(monkeypatch) -> None:
    conf = _worker_conf(monkeypatch, master="spark://spark-master:7077", driver_host="10.1.2.3",
                        conf=json.dumps({"spark.executor.cores": "2", "spark.executor.memory": "2g",
                                         "spark.cores.max": "4"}))
    assert conf["spark.master"] == "spark://spark-master:7077"
    assert "spark.default.parallelism" not in conf
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "10.1.2.3"
    assert (conf["spark.executor.cores"], conf["spark.executor.memory"], conf["spark.cores.max"]) == ("2", "2g", "4")


def test_the_user_s_configuration_wins_over_tidemark_s(monkeypatch) -> None:
    conf = _worker_conf(monkeypatch, master="spark://m:7077",
                        conf=json.dumps({"spark.driver.bindAddress": "0.0.0.0", "spark.default.parallelism": "8"}))
    assert (conf["spark.driver.bindAddress"], conf["spark.default.parallelism"]) == ("0.0.0.0", "8")
    assert conf["spark.driver.host"] == "127.0.0.1"


@pytest.mark.parametrize(("master", "parallelism"), [("local[4]", "4"), ("local[*]", None)])
def test_local_mode_parallelism_is_its_thread_count(master: str, parallelism: str | None) -> None:
    conf = spark_conf(SessionOptions(master=master, class_archive=False))
    assert conf.get("spark.default.parallelism") == parallelism


def test_the_python_source_adds_no_jars() -> None:
    options = session_options(TidemarkSettings(), "tidemark-s", TidemarkKafkaSource({}))
    assert "spark.jars" not in spark_conf(options)


def test_an_idle_worker_is_taken_only_by_a_job_on_the_same_master() -> None:
    """runtime.placement.idle_workers matches a session by its options, the master among them."""
    from tidemark.config.settings import SparkSettings
    from tidemark.runtime.placement.idle_workers import session_fingerprint

    def fingerprint(**spark: str) -> str:
        return session_fingerprint(TidemarkSettings(bootstrap_servers="b:9092",
                                                    spark=SparkSettings(source="tidemark-kafka", **spark)))

    assert fingerprint() == fingerprint(master="local[2]")
    assert len({fingerprint(), fingerprint(master="spark://m:7077"), fingerprint(master="spark://n:7077"),
                fingerprint(master="spark://m:7077", driver_host="10.0.0.1")}) == 4


def test_an_idle_worker_is_taken_only_by_a_job_importing_from_the_same_path(monkeypatch, tmp_path) -> None:
    """A job started with its module on another PYTHONPATH (an upgrade's new code) cannot be run
    by an idle worker of a job without it: that worker could not import the module."""
    from tidemark.config.settings import SparkSettings
    from tidemark.runtime.placement.idle_workers import session_fingerprint

    def fingerprint() -> str:
        return session_fingerprint(TidemarkSettings(bootstrap_servers="b:9092",
                                                    spark=SparkSettings(source="tidemark-kafka")))

    monkeypatch.delenv("PYTHONPATH", raising=False)
    plain = fingerprint()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    upgraded = fingerprint()
    monkeypatch.chdir(tmp_path)
    assert len({plain, upgraded, fingerprint()}) == 3
