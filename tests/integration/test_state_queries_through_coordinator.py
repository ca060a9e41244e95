"""Live state queries (``GET /api/v1/jobs/{job}/stages/{stage}/state/{name}``, ``tidemark state
get``) through the real coordinator on the real broker. The test plays the job: its registration
and supervisor heartbeats (:class:`ProtocolParticipant`), and two stage workers, each with the
worker's own control plane and its share of the stage's tasks, their state counted by the runtime's
tasks and backends (:class:`StateQueryWorker`; what a worker adds to this is Spark feeding the
tasks, which ``tests/e2e/test_live_state_queries.py`` runs); and a worker of the attempt before,
with other counts, whose answers the coordinator must not take."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from protocol_participant import ProtocolParticipant
from state_query_worker import StateQueryWorker
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.checkpoint import plan_assignments
from tidemark.examples.access_log import url_counts
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.testing.harness import KeyedProcessFunctionHarness
from tidemark.types import Epoch, JobId, OperatorId

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOKEN = "live-state-test-token-3b7e11"
STAGE = OperatorId("count_hits")
URLS = [f"/page/{n}" for n in range(40)]


@dataclass
class Deployment:
    url: str
    bootstrap: str
    topics: TopicNames
    storage_url: str

    def client(self, token: str | None = TOKEN) -> CoordinatorClient:
        return CoordinatorClient(self.url, token, timeout_s=30)


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("live-state")
    storage_url = (home / "checkpoints").as_uri()
    topics = TopicNames(prefix=f"t-live-state-{uuid.uuid4().hex[:8]}")
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_API_TOKEN": TOKEN,
           "TIDEMARK_CHECKPOINT__INTERVAL_MS": "600000"}  # nobody acks: no checkpoint is triggered
    with LocalCluster(home, kafka_bootstrap, topic_prefix=topics.prefix, env=env) as cluster:
        cluster.start(["coordinator"])
        cluster.wait_ready(timeout_s=60)
        yield Deployment(cluster.services["coordinator"].url, kafka_bootstrap, topics, storage_url)


@dataclass
class RunningJob:
    job: JobId
    counts: Counter[str]
    workers: list[StateQueryWorker]
    stale: StateQueryWorker


@pytest.fixture
def running_job(deployment: Deployment) -> Iterator[RunningJob]:
    """A running count job: registered, alive, its two workers holding two tasks each (4 tasks)."""
    job = JobId(f"live-{uuid.uuid4().hex[:8]}")
    tasks = plan_assignments((STAGE,), 4, 128)
    participant = ProtocolParticipant(deployment.bootstrap, deployment.topics, deployment.storage_url, job, tasks)
    counts = Counter(URLS[(n * 7) % len(URLS)] for n in range(1000) if n % 3)
    spec = url_counts(job_id=job, parallelism=4)
    with KeyedProcessFunctionHarness.for_stage(spec, STAGE) as harness, \
            KeyedProcessFunctionHarness.for_stage(spec, STAGE) as before:
        for url, hits in counts.items():
            for _ in range(hits):
                harness.process({"url": url})
            before.process({"url": url})
        lock = threading.Lock()
        workers = [StateQueryWorker(deployment.bootstrap, deployment.topics, job, STAGE, harness.tasks[i:i + 2],
                                    lock).start() for i in (0, 2)]
        # a worker of the attempt before (epoch 0), not released yet: its answers are never taken
        stale = StateQueryWorker(deployment.bootstrap, deployment.topics, job, STAGE, before.tasks, lock,
                                 Epoch(0)).start()
        try:
            participant.register()
            client = deployment.client()
            deadline = time.monotonic() + 30
            while True:  # registered, and both workers' control planes positioned
                try:
                    if all(client.state_value(job, STAGE, "hits", url)["value"] == counts[url] for url in URLS[:8]):
                        break
                except ApiError as exc:
                    assert exc.status in (404, 409) and time.monotonic() < deadline, exc  # not registered yet
            yield RunningJob(job, counts, workers, stale)
        finally:
            for worker in [*workers, stale]:
                worker.stop()
            participant.close()


def test_concurrent_queries_are_each_answered_by_the_worker_owning_the_key(deployment: Deployment,
                                                                           running_job: RunningJob):
    job, counts = running_job.job, running_job.counts
    client = deployment.client()
    before = [w.answered for w in running_job.workers]
    keys = [URLS[n % len(URLS)] for n in range(300)]

    def ask(url: str) -> tuple[str, int | None, str, float]:
        started = time.monotonic()
        try:
            document = client.state_value(job, STAGE, "hits", url)
            return url, document["value"], document["task"], time.monotonic() - started
        except ApiError as exc:
            return url, exc.status, "", time.monotonic() - started

    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(ask, keys))
    found = [(url, value, task) for url, value, task, _ in replies if task]
    assert len(found) == sum(1 for url in keys if counts[url]), [r for r in replies if not r[2]][:5]
    assert all(value == counts[url] for url, value, _ in found)
    assert {r[1] for r in replies if not r[2]} <= {404}  # URLs never counted
    answered = [w.answered - b for w, b in zip(running_job.workers, before)]
    assert sum(answered) == len(keys) and all(answered)  # exactly one answer per query, from both workers
    # the stale worker answered every query too (it polls on its own, so its last answers may come after
    # the current workers' were taken), and its counts of 1 were not taken
    deadline = time.monotonic() + 15
    while running_job.stale.answered < len(keys) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_job.stale.answered >= len(keys) and min(counts.values()) > 1
    latencies = sorted(r[3] for r in replies)
    print(f"300 queries, 16 at a time: p50 {latencies[150] * 1000:.0f} ms, p99 {latencies[296] * 1000:.0f} ms")


def test_bad_stage_state_key_and_token_are_4xx_and_a_silent_worker_409(deployment: Deployment,
                                                                       running_job: RunningJob):
    job, client = running_job.job, deployment.client()

    def status(*args: str, key_type: str | None = None, using: CoordinatorClient = client) -> int:
        try:
            using.state_value(*args, key_type=key_type)
        except ApiError as exc:
            return exc.status or 0
        return 200

    assert status(job, STAGE, "hits", "/never/seen") == 404
    assert status(job, STAGE, "visits", URLS[1]) == 404
    assert status(job, "top_urls", "hits", URLS[1]) == 404
    assert status("no-such-job", STAGE, "hits", URLS[1]) == 404
    assert status(job, STAGE, "hits", "12", key_type="int") == 404  # the stage's keys are strings
    assert status(job, STAGE, "hits", "x", key_type="int") == 400
    assert status(job, STAGE, "hits", URLS[1], using=deployment.client("a-wrong-token-000000")) == 401
    assert status(job, STAGE, "hits", URLS[1], using=deployment.client(None)) == 401

    running_job.workers[0].stop()  # the worker of tasks 0 and 1 is gone (restoring, failing over)
    silent = next(url for url in URLS if running_job.counts[url] and status(job, STAGE, "hits", url) != 200)
    with pytest.raises(ApiError) as refused:
        client.state_value(job, STAGE, "hits", silent)
    assert refused.value.status == 409 and "no worker of stage 'count_hits'" in refused.value.message


def test_the_cli_prints_the_value_and_one_line_errors(deployment: Deployment, running_job: RunningJob):
    env = {**{k: v for k, v in os.environ.items() if k != "TIDEMARK_API_TOKEN"},
           "TIDEMARK_COORDINATOR_URL": deployment.url, "TIDEMARK_API_TOKEN": TOKEN}
    url = next(u for u in URLS if running_job.counts[u])

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidemark.cli", "state", "get", "--job", running_job.job,
                               "--stage", STAGE, *args], env=env, capture_output=True, text=True, timeout=60)

    found = cli("--state", "hits", "--key", url)
    assert found.returncode == 0 and found.stdout.strip() == str(running_job.counts[url]), found.stderr
    missing = cli("--state", "hits", "--key", "/never/seen")
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1
    assert missing.stderr.startswith("error: HTTP 404: state 'hits' of stage 'count_hits' holds no value")
