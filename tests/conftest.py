"""Suite-wide fixtures: one real Kafka broker per test session and unique topic names.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set (any real Kafka), otherwise the embedded
broker: Apache Kafka (KRaft) by default, Tansu with ``TIDEMARK_BROKER_ENGINE=tansu``; started once
for the run on a free port (one for all the lanes of ``pytest -n``, ``tests/shared_broker.py``)
and killed with the run (also when the test process itself is killed).
Tests of behaviour Tansu lacks carry ``broker_gaps.tansu_gap``.

Tiers: every test gets exactly one of the markers ``unit`` (no broker, no Spark, no process of
its own: ``pytest -m unit`` runs in well under a minute), ``integration`` (a real broker, Spark,
Prometheus, helm or kubectl, service processes) or ``e2e`` (whole jobs on the local pipeline, for
minutes). A test's tier is the highest of: its folder, a marker it carries, and the fixtures it
uses, so a test in ``tests/unit`` that asks for ``kafka_bootstrap`` is an integration test.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

import cpu_report
from tidemark.broker.embedded import kafka_or_embedded
from tidemark.kafka.topics import TopicNames

if TYPE_CHECKING:
    from spark_standalone import StandaloneCluster


# no per-example deadline: a property test checks what holds, never how fast (under the suite's
# three lanes on two cores one example can take seconds)
settings.register_profile("tidemark", deadline=None)
settings.load_profile("tidemark")

TIERS = ("unit", "integration", "e2e")
_FOLDER_TIERS = {"e2e": "e2e", "integration": "integration", "deploy": "integration", "monitoring": "integration"}
_INTEGRATION_FIXTURES = {"kafka_bootstrap", "spark", "topic_names", "postgres_dsn", "spark_cluster"}
# the longest files of their tier first (about the seconds of the whole file under ``make test``
# on a 2-core machine, from ``--durations``); a file missing here runs after them, in its tier.
# ``make test`` runs three lanes: the first three files start together, and the short ones fill
# in at the end
_LONGEST_FIRST = {name: rank for rank, name in enumerate((  # seconds in a whole run on the 2-core machine
    "test_changelog_exactly_once.py",  # ~400: 3 SIGKILLs in changelog mode, then a savepoint resumed rescaled
    "test_production_continuity.py",  # ~400: an upgrade, a tree SIGKILL and a restore call; a checkpoint timeout
    "test_exactly_once.py",  # ~300: 4 SIGKILLs of one of 4 workers (successors from warm standbys)
    "test_demo.py",  # ~290: a demo interrupted by Ctrl-C, then a whole one (6 workers, 3 warm standbys)
    "test_chart_worker_hosts.py",  # ~280: 4 worker-host pods, a host pod's and the supervisor's restarts
    "test_job_graph.py",  # ~270: a five-worker graph, 4 SIGKILLs
    "test_chaos.py",  # ~260: each process kind SIGKILLed once, a broker pause
    "test_scale_out.py",  # ~250: a rescale 2 -> 3 -> 2 through savepoints, a renamed stage
    "test_windows.py",  # ~250: two windowed jobs, 3 SIGKILLs, late records, a savepoint rescale
    "test_chart_started_worker.py",  # ~240 (the pods with the image's cache and C1, chart_pods)
    "test_postgres_sink.py",  # ~230: 4 SIGKILLs of the PostgreSQL sink, a rescale 2 -> 3
    "test_rules_and_enrichment.py",  # ~230: two jobs, six workers, 4 SIGKILLs
    "test_corrupted_checkpoint.py",  # ~190
    "test_spark_step.py",  # ~110 (75 alone): two jobs with a Spark step, each stopped with a savepoint and restored
    "test_spark_cluster_job.py",  # ~90 (65 alone): a Spark standalone cluster, a job on it with each source
    "test_state_writer.py",  # ~70 (40 alone): a bootstrapped job, a transformed savepoint, two more starts
    "test_live_state_queries.py",  # ~90 (62-83 alone): 1,000 live queries against a job under load
    "test_event_time.py",  # ~140
    "test_broker_faults.py",  # ~110
    "test_savepoints_and_modes.py",  # ~100
    "test_no_leaks.py",  # ~80: 100 checkpoints by definition, little CPU
    "test_readme_commands.py",  # ~80, 60 alone: late, when the other lanes run lighter files (its job waits
    # for its first checkpoint under whatever else runs; it took 7 minutes beside the heaviest ones)
    "test_job_states.py",  # ~90
    "test_monitoring_live_pipeline.py",  # ~65 (tests/monitoring, e2e by its fixtures)
    "test_checkpoints_page.py",  # ~50
    "test_poison_records.py",  # ~45
))}


def _tier(item: pytest.Item) -> str:
    folder = item.path.relative_to(item.config.rootpath / "tests").parts[0]
    rank = TIERS.index(_FOLDER_TIERS.get(folder, "unit"))
    if item.get_closest_marker("integration") or item.get_closest_marker("spark") or \
            _INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
        rank = max(rank, TIERS.index("integration"))
    if item.get_closest_marker("e2e") or item.get_closest_marker("slow"):
        rank = TIERS.index("e2e")
    return TIERS[rank]


def pytest_configure(config: pytest.Config) -> None:
    cpu_report.install(config)  # PYTEST_CPU_REPORT: the CPU each test costs


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier, and order the run longest first: e2e files by their measured
    length, then integration, then unit. ``make test`` runs three pytest-xdist workers that take whole
    files in this order (``--dist loadfile --no-loadscope-reorder``), so the long files start
    first and the short ones fill in at the end."""
    tiers = {}
    for item in items:
        tiers[item] = _tier(item)
        item.add_marker(tiers[item])
    position = {item: index for index, item in enumerate(items)}
    items.sort(key=lambda item: (-TIERS.index(tiers[item]), _LONGEST_FIRST.get(item.path.name, len(_LONGEST_FIRST)),
                                 position[item]))


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's broker: under pytest-xdist one for every lane (``shared_broker``), else this
    process's own."""
    if os.environ.get("PYTEST_XDIST_WORKER") and not os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        from shared_broker import shared_broker

        yield shared_broker(tmp_path_factory.getbasetemp().parent, os.getppid())
        return
    with kafka_or_embedded(tmp_path_factory.mktemp("embedded-broker")) as (bootstrap, _):
        yield bootstrap


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server allowing prepared transactions (``tests/postgres_server.py``)."""
    from postgres_server import postgres_server

    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator["StandaloneCluster"]:
    """A Spark standalone master and one worker (1 core, 1 GiB) from PySpark's own distribution,
    per test module (``tests/spark_standalone.py``); stopped with every process they started."""
    from spark_standalone import standalone_cluster

    with standalone_cluster(tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``unique_name("orders")`` -> a topic/group name no other test uses."""
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name)[:40].strip("-")
    run = uuid.uuid4().hex[:8]

    def make(base: str) -> str:
        return f"t-{test}-{run}-{base}"

    return make


@pytest.fixture
def topic_names(unique_name: Callable[[str], str]) -> TopicNames:
    """A fresh set of deployment topic names (control, acks, dead letters, ...)."""
    return TopicNames(prefix=unique_name("tm"))
