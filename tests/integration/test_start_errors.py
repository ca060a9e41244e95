"""Errors at start say what is wrong once: real processes, the real broker where one is needed.

* Kafka unreachable (``tidemark run coordinator``, ``tidemark jobs run``): one line naming the
  address and what to check, exit 69, no traceback, no librdkafka lines, in bounded time;
* ``jobs run`` on a missing input topic: the reason once, exit 3, no attempt started, and the
  coordinator shows the job ``FAILED`` with that reason;
* ``jobs run`` with a job reference that does not import: one line, exit 2, nothing started.

None of these starts Spark.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tidemark.local.cluster import LocalCluster
from tidemark.local.pipeline import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOKEN = "start-errors-test-token-7f3a91"
JOB_REF = "tidemark.examples.access_log:url_counts"
HINT = "(check KAFKA_BOOTSTRAP_SERVERS and that the broker runs)"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tidemark(*args: str, env: dict[str, str], timeout_s: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tidemark.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout_s)
    return done, time.monotonic() - started


def base_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_", "KAFKA_"))}
    return {**env, "TIDEMARK_HOME": str(home), "TIDEMARK_API_TOKEN": TOKEN, **extra}


def assert_one_line(done: subprocess.CompletedProcess, expected_start: str) -> str:
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "librdkafka" not in output.lower(), output
    assert len(output.splitlines()) < 5, output
    (line,) = [li for li in done.stderr.splitlines() if li.startswith("tidemark ")]
    assert line.startswith(expected_start), line
    return line


@pytest.mark.parametrize("command", [("run", "coordinator"), ("jobs", "run", JOB_REF)],
                         ids=["run-coordinator", "jobs-run"])
def test_an_unreachable_broker_is_one_line_with_exit_69(command: tuple[str, ...], tmp_path: Path) -> None:
    port = closed_port()
    done, took = tidemark(*command, env=base_env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=f"127.0.0.1:{port}"))
    assert done.returncode == 69, done.stdout + done.stderr
    component = "coordinator" if command[0] == "run" else "jobs run"
    line = assert_one_line(done, f"tidemark {component}: cannot reach Kafka at 127.0.0.1:{port} {HINT}: ")
    # librdkafka's words for it depend on which of its errors comes first (a busy machine changes that)
    assert "Connection refused" in line or "brokers are down" in line, line
    assert took < 45, f"took {took:.0f}s"


def test_a_bad_job_reference_is_one_line_with_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    done, _ = tidemark("jobs", "run", "acme_jobs_missing.orders:job",
                       env=base_env(tmp_path, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:1"))
    assert done.returncode == 2, done.stdout + done.stderr
    assert_one_line(done, "tidemark jobs run: cannot import 'acme_jobs_missing.orders': No module named")
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("start-errors")
    with LocalCluster(home, kafka_bootstrap, topic_prefix=f"t-start-errors-{uuid.uuid4().hex[:8]}",
                      env={"TIDEMARK_API_TOKEN": TOKEN}) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=90)
        yield cluster


def jobs_list(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    env = base_env(cluster.home, TIDEMARK_COORDINATOR_URL=cluster.services["coordinator"].url)
    return tidemark("jobs", "list", *args, env=env, timeout_s=60)[0]


def test_a_missing_input_topic_fails_the_job_once_with_the_reason(deployment: LocalCluster) -> None:
    cluster = deployment
    suffix = uuid.uuid4().hex[:8]
    job, topic = f"missing-input-{suffix}", f"t-never-created-{suffix}"
    args = {"job_id": job, "input_topic": topic, "output_topic": f"t-out-{suffix}", "parallelism": 1}
    env = base_env(cluster.home, KAFKA_BOOTSTRAP_SERVERS=cluster.bootstrap, TIDEMARK_TOPIC_PREFIX=cluster.topic_prefix,
                   TIDEMARK_COORDINATOR_URL=cluster.services["coordinator"].url)
    done, took = tidemark("jobs", "run", JOB_REF, "--job-args", json.dumps(args), env=env)
    assert done.returncode == 3, done.stdout + done.stderr
    reason = f"input topic '{topic}' does not exist (create it; a job creates only its channel and output topics)"
    output = done.stdout + done.stderr
    assert [li for li in output.splitlines() if not li.startswith("{")] == [f"tidemark jobs run: {reason}"], output
    assert output.count("does not exist") == 1 and "Traceback" not in output
    assert len(output.splitlines()) < 5, output
    assert '"starting attempt"' not in output, "no attempt may start"
    assert not list(cluster.home.glob(f"runs/{job}-*/*.log")), "no stage worker may start"
    assert took < 60, f"took {took:.0f}s"

    def failed() -> dict | None:
        listing = json.loads(jobs_list(cluster, "--json").stdout)
        return next((j for j in listing["jobs"] if j["job"] == job and j["state"] == "FAILED"), None)

    shown = wait_for(failed, 30, "the job's FAILED state")
    assert shown["state_reason"] == reason
    text = jobs_list(cluster)
    assert text.returncode == 0 and text.stdout.splitlines()[0].split()[:2] == ["JOB", "STATE"]
    (row,) = [li for li in text.stdout.splitlines() if li.startswith(job)]
    assert row.split()[1] == "FAILED" and row.endswith(reason)
