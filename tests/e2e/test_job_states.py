"""Job states end to end: a job run through the coordinator shows RUNNING in ``tidemark jobs
list``; ``tidemark jobs cancel`` makes it CANCELLED (pending checkpoints aborted, none counted
as a failure), it stays CANCELLED after the checkpoint timeout has long elapsed, and a restarted
coordinator rebuilds the same state from its topics. Real broker, services, supervisor and Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tidemark.examples.generator import generate, produce
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.cluster import LocalCluster
from tidemark.local.pipeline import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

TOKEN = "job-states-test-token-58c2e0"
JOB_REF = "tidemark.examples.access_log:url_counts"
TIMEOUT_MS = 4000


def cli(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}
    env.update(TIDEMARK_COORDINATOR_URL=url, TIDEMARK_API_TOKEN=TOKEN)
    return subprocess.run([sys.executable, "-m", "tidemark.cli", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def job_of(url: str, job: str) -> dict[str, Any] | None:
    done = cli(url, "jobs", "list", "--json")
    if done.returncode != 0:
        return None  # e.g. 503 while a restarted coordinator replays its topics
    return next((j for j in json.loads(done.stdout)["jobs"] if j["job"] == job), None)


def row_of(url: str, job: str) -> list[str]:
    done = cli(url, "jobs", "list")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert header.split() == ["JOB", "STATE", "EPOCH", "COMPLETED", "FAILED", "LAST", "ID", "LAST", "SAVEPOINT",
                              "WORKERS", "REASON"]
    (row,) = [r for r in rows if r.split()[0] == job]
    return row.split()


def test_cancel_makes_a_running_job_cancelled_not_failed(kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    args = {"job_id": f"states-{suffix}", "input_topic": f"t-states-in-{suffix}",
            "output_topic": f"t-states-out-{suffix}", "parallelism": 1}
    job = args["job_id"]
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(args["input_topic"], 1)])
    produce(kafka_bootstrap, args["input_topic"], list(generate(300)), 1)
    env = {"TIDEMARK_API_TOKEN": TOKEN, "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000",
           "TIDEMARK_CHECKPOINT__TIMEOUT_MS": str(TIMEOUT_MS), "TIDEMARK_CHECKPOINT__TOLERABLE_FAILURES": "1000"}
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=f"t-states-{suffix}", env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=90)
        coordinator = cluster.services["coordinator"]
        url = coordinator.url

        submitted = cli(url, "jobs", "submit", JOB_REF, "--job-args", json.dumps(args), "--json")
        assert submitted.returncode == 0, submitted.stderr
        run = json.loads(submitted.stdout)
        running = wait_for(lambda: (j := job_of(url, job)) is not None and j["state"] == "RUNNING"
                           and j["counts"]["completed"] >= 1 and j, 240,
                           "the job RUNNING with a completed checkpoint")
        assert running["state_reason"] is None
        assert row_of(url, job)[1] == "RUNNING"

        failures_before = job_of(url, job)["consecutive_failures"]  # a busy machine may time one out while running
        cancelled = cli(url, "jobs", "cancel", run["run_id"])
        assert cancelled.returncode == 0, cancelled.stderr
        exited = wait_for(lambda: (r := json.loads(cli(url, "jobs", "runs", run["run_id"], "--json").stdout))
                          ["status"] == "EXITED" and r, 60, "the run's exit")
        assert exited["exit_code"] == 143
        reason = "cancelled: the supervisor got SIGTERM"
        state = wait_for(lambda: (j := job_of(url, job)) is not None and j["state"] == "CANCELLED" and j, 30,
                         "the CANCELLED state")
        assert state["state_reason"] == reason and state["pending_checkpoints"] == []

        time.sleep(TIMEOUT_MS / 1000 * 2)  # any checkpoint left pending would have timed out by now
        later = job_of(url, job)
        assert later is not None and later["state"] == "CANCELLED", later
        assert later["consecutive_failures"] == failures_before and later["pending_checkpoints"] == []
        history = json.loads(cli(url, "checkpoints", "history", job, "--json").stdout)["checkpoints"]
        assert not [e for e in history if (e["failure_reason"] or "").startswith("TIMEOUT")], history
        row = row_of(url, job)
        assert row[1] == "CANCELLED" and " ".join(row).endswith(reason)

        port = coordinator.port
        cluster.stop_one("coordinator")
        cluster.start_one("coordinator", port=port)
        cluster.wait_ready(timeout_s=90, names=["coordinator"])
        rebuilt = wait_for(lambda: job_of(url, job), 60, "the job after the coordinator's restart")
        assert (rebuilt["state"], rebuilt["state_reason"]) == ("CANCELLED", reason)
