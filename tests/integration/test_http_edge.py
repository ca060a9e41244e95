"""The HTTP edge of the services on the real broker: schemathesis against the coordinator's OpenAPI
description (no 5xx for any generated input), plus hand-written cases: the token on every
non-public path of all four services, the bind address, edge inputs, slow clients."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tidemark.checkpoint import plan_assignments
from tidemark.kafka.clients import producer_config
from tidemark.local.cluster import LocalCluster, LocalService
from tidemark.local.pipeline import wait_for
from tidemark.protocol import codec
from tidemark.protocol.messages import JobRegistration
from tidemark.chassis.http_edge import BODY_TIMEOUT_S, HEADER_TIMEOUT_S
from tidemark.types import CheckpointingMode, Epoch, JobId, OperatorId

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

TOKEN = "http-edge-test-token-0f3a9c1d"
JOB = JobId("edge-job")
SERVICES = ["coordinator", "checkpoint-store", "changelog", "materializer"]
PUBLIC = ("/livez", "/readyz", "/metrics")


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    home = tmp_path_factory.mktemp("edge")
    prefix = f"t-edge-{int(time.time() * 1000) % 10**8}"
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": (home / "checkpoints").as_uri(), "TIDEMARK_API_TOKEN": TOKEN,
           "TIDEMARK_CHECKPOINT__INTERVAL_MS": "600000", "TIDEMARK_JOBS__LAUNCHER": "local",
           "TIDEMARK_JOBS__CATALOG": "tidemark.examples.access_log:url_counts"}
    with LocalCluster(home, kafka_bootstrap, topic_prefix=prefix, env=env) as running:
        running.start(SERVICES)
        running.wait_ready(timeout_s=120)
        producer = Producer(producer_config({"bootstrap.servers": kafka_bootstrap}))
        tasks = plan_assignments((OperatorId("op"),), 2, 128)
        producer.produce(f"{prefix}.control", key=JOB.encode(), value=codec.encode(JobRegistration(
            JOB, Epoch(1), CheckpointingMode.EXACTLY_ONCE, 128, tasks, tuple(t.task_id for t in tasks),
            int(time.time() * 1000))))
        producer.flush(10)
        # the coordinator folds the registration a moment later
        wait_for(lambda: JOB in call(running.services["coordinator"], "GET", "/api/v1/jobs")[1].decode(), 60,
                 "the coordinator knowing the registered job", poll_s=0.2)
        yield running


def call(service: LocalService, method: str, path: str, body: bytes | None = None,
         token: str | None = TOKEN) -> tuple[int, bytes]:
    request = urllib.request.Request(service.url + path, data=body, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _listening(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (``ss -ltnH``)."""
    lines = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout.splitlines()
    return {fields[3].rsplit(":", 1)[0] for fields in (line.split() for line in lines)
            if len(fields) >= 4 and fields[3].rsplit(":", 1)[1] == str(port)}


def test_every_service_binds_where_http_host_says(cluster: LocalCluster) -> None:
    others = [a for a in subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
              if ":" not in a and not a.startswith("127.")]
    for name, service in cluster.services.items():
        assert _listening(service.port) == {"127.0.0.1"}, f"{name} listens on {_listening(service.port)}"
        for address in others:  # not reachable on this machine's other addresses
            with pytest.raises(OSError):
                socket.create_connection((address, service.port), timeout=2).close()


def test_only_probes_metrics_and_openapi_answer_without_the_token(cluster: LocalCluster) -> None:
    for name, service in cluster.services.items():
        for path in PUBLIC:
            assert call(service, "GET", path, token=None)[0] in (200, 503), (name, path)
        for path in ("/", "/router/", "/table/", "/api/v1/jobs", "/api/v1/runs", "/nothing", "/livez/x"):
            for token in (None, "wrong-token-wrong-token"):
                status, body = call(service, "GET", path, token=token)
                assert status == 401, (name, path, status, body[:200])
                assert json.loads(body)["status"] == 401
        assert call(service, "GET", "/nothing")[0] == 404  # with the token: a JSON 404
    coordinator = cluster.services["coordinator"]
    assert call(coordinator, "GET", "/openapi.json", token=None)[0] == 200  # public: holds no data
    assert call(coordinator, "GET", "/api/v1/jobs")[0] == 200


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/api/v1/jobs/" + "j" * 5000 + "/checkpoints/retained", None),
    ("GET", "/api/v1/jobs/" + "j" * 255 + "/savepoints", None),
    ("POST", f"/api/v1/jobs/{JOB}/restore", json.dumps({"savepoint_path": f"{JOB}/chk-1/task.state",
                                                        "parallelism": 1}).encode()),
    ("POST", f"/api/v1/jobs/{JOB}/restore", json.dumps({"savepoint_path": f"{JOB}/chk-1/_metadata/x",
                                                        "parallelism": 1}).encode()),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b"[" * 100_000 + b"]" * 100_000),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b'{"stop": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    ("POST", f"/api/v1/jobs/{JOB}/restore", b'{"checkpoint_id": 1' + b"0" * 5000 + b', "parallelism": 1}'),
    ("POST", f"/api/v1/jobs/{JOB}/restore", b'{"checkpoint_id": 1e999, "parallelism": 1}'),
    ("POST", f"/api/v1/jobs/{JOB}/restore", b'{"savepoint_path": "a\\ud800b", "parallelism": 1}'),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b'{"target": "\\udfff"}'),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b'{"target": "other-job/savepoints/mine"}'),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b'{"target": "' + JOB.encode() + b'/chk-3"}'),
    ("POST", "/api/v1/runs", b'{"job": "x\\udc80", "args": {"a": "\\ud800"}}'),
    ("POST", f"/api/v1/jobs/{JOB}/savepoints", b"\xff\xfe{}"),
])
def test_malformed_requests_get_a_4xx(cluster: LocalCluster, method: str, path: str, body: bytes | None) -> None:
    status, answer = call(cluster.services["coordinator"], method, path, body)
    assert 400 <= status < 500, (status, answer[:300])


def test_a_target_inside_the_jobs_savepoint_area_is_accepted(cluster: LocalCluster) -> None:
    status, answer = call(cluster.services["coordinator"], "POST", f"/api/v1/jobs/{JOB}/savepoints",
                          json.dumps({"target": f"{JOB}/savepoints/before-upgrade"}).encode())
    assert status == 202, answer


def _send_slowly(port: int, first: bytes) -> tuple[float, bytes]:
    """Send ``first``, then nothing; the time until the server closes and what it sent."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(first)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return time.monotonic() - started, received


def test_slow_clients_are_dropped(cluster: LocalCluster) -> None:
    from concurrent.futures import ThreadPoolExecutor

    port = cluster.services["coordinator"].port
    headers_only = b"GET /livez HTTP/1.1\r\nHost: x\r\nX-Slow: "
    partial_body = (f"POST /api/v1/jobs/{JOB}/savepoints HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"stop\"").encode()
    with ThreadPoolExecutor(2) as pool:
        slow_headers = pool.submit(_send_slowly, port, headers_only)
        slow_body = pool.submit(_send_slowly, port, partial_body)
        (headers_s, headers_answer), (body_s, body_answer) = slow_headers.result(), slow_body.result()
    assert HEADER_TIMEOUT_S - 1 <= headers_s <= HEADER_TIMEOUT_S + 5 and headers_answer == b""
    assert BODY_TIMEOUT_S - 1 <= body_s <= BODY_TIMEOUT_S + 5 and b" 408 " in body_answer.split(b"\r\n")[0]
    assert cluster.services["coordinator"].ready()


def test_no_generated_request_gets_a_5xx(cluster: LocalCluster, tmp_path: Path) -> None:
    """schemathesis, bounded: at most 30 examples per operation; only the status class is checked
    here (test_openapi checks the documents); runs are excluded (they start processes)."""
    coordinator = cluster.services["coordinator"]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{coordinator.url}/openapi.json",
         "--url", coordinator.url, "--header", f"Authorization: Bearer {TOKEN}",
         "--checks", "not_a_server_error", "--max-examples", "30", "--phases", "examples,coverage,fuzzing",
         "--exclude-path-regex", "^/api/v1/runs", "--request-timeout", "20", "--seed", "1",
         "--no-color", "--suppress-health-check", "all"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert time.monotonic() - started < 180, output[-2000:]
    assert coordinator.process.poll() is None
