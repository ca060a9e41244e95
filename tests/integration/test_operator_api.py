"""The operator HTTP API and CLI against the real coordinator and checkpoint-store services on a
real broker, with the test as the job's participant (the pattern of test_checkpoint_services).

One deployment serves the whole module (token configured); every test uses its own job id.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol_participant import ProtocolParticipant
from tidemark.admin.client import CoordinatorClient
from tidemark.checkpoint import plan_assignments
from tidemark.checkpoint_store import encode_metadata
from tidemark.config.settings import TidemarkSettings
from tidemark.examples.access_log import url_counts
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.runtime.supervisor.attempt_planner import AttemptPlanner, RunOptions
from tidemark.protocol.messages import (
    CheckpointCompleted,
    CheckpointMetadata,
    CheckpointTrigger,
    RestoreCommand,
    SavepointRequest,
    TaskAssignment,
)
from tidemark.types import CheckpointType, JobId, KeyGroup, OperatorId, task_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TOKEN = "operator-api-test-token-7f3a9c"
ACCESS_LOG_COUNTS = "tidemark.examples.access_log:url_counts"
OPERATOR = OperatorId("counts")
MAX_PARALLELISM = 128
TASKS = (TaskAssignment(task_id(OPERATOR, 0), OPERATOR, 0, KeyGroup(0), KeyGroup(63)),
         TaskAssignment(task_id(OPERATOR, 1), OPERATOR, 1, KeyGroup(64), KeyGroup(127)))


@dataclass(frozen=True)
class Deployment:
    url: str
    bootstrap: str
    topics: TopicNames
    storage_url: str
    root: Path


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("operator-api")
    storage_url = (home / "checkpoints").as_uri()
    topics = TopicNames(prefix=f"t-operator-api-{uuid.uuid4().hex[:8]}")
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_API_TOKEN": TOKEN,
           "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000", "TIDEMARK_CHECKPOINT__TIMEOUT_MS": "60000",
           "TIDEMARK_CHECKPOINT__TOLERABLE_FAILURES": "100", "TIDEMARK_RETAINED_CHECKPOINTS": "5"}
    with LocalCluster(home, kafka_bootstrap, topic_prefix=topics.prefix, env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=60)
        yield Deployment(cluster.services["coordinator"].url, kafka_bootstrap, topics, storage_url,
                         home / "checkpoints")


class Participant(ProtocolParticipant):
    """A two-task job speaking the protocol over Kafka; ``pump`` acks every trigger it reads."""

    def __init__(self, deployment: Deployment, job: str) -> None:
        super().__init__(deployment.bootstrap, deployment.topics, deployment.storage_url, JobId(job), TASKS,
                         MAX_PARALLELISM)
        self.seen: list[Any] = []
        self.written: dict[int, int] = {}  # checkpoint id -> bytes written by both tasks
        self._acked: set[int] = set()

    def _ack(self, trigger: CheckpointTrigger) -> None:
        for task in TASKS:
            ack = self.ack(trigger, task)
            written = ack.task.state_handles[0].checkpointed_size_bytes
            self.written[trigger.checkpoint_id] = self.written.get(trigger.checkpoint_id, 0) + written

    def find(self, kind: type, predicate: Callable[[Any], bool] = lambda m: True) -> Any:
        return next((m for m in self.seen if isinstance(m, kind) and predicate(m)), None)

    def pump(self, until: Callable[[], bool], timeout_s: float = 30.0, *, ack: bool = True) -> None:
        """Read the control topic (acking this job's triggers) until ``until()``."""
        deadline = time.monotonic() + timeout_s
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout_s}s; seen {self.seen[-5:]}")
            message = self.poll()
            if message is None or getattr(message, "job_id", None) != self.job:
                continue
            self.seen.append(message)
            if ack and isinstance(message, CheckpointTrigger) and message.checkpoint_id not in self._acked:
                self._acked.add(message.checkpoint_id)
                self._ack(message)

    def wait_for(self, kind: type, predicate: Callable[[Any], bool] = lambda m: True,
                 timeout_s: float = 30.0, *, ack: bool = True) -> Any:
        self.pump(lambda: self.find(kind, predicate) is not None, timeout_s, ack=ack)
        return self.find(kind, predicate)


@pytest.fixture
def participant(deployment: Deployment, request: pytest.FixtureRequest):
    job = f"job-{request.node.name[5:30].strip('_').replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    running = Participant(deployment, job)
    try:
        yield running
    finally:
        running.close()


def call(deployment: Deployment, method: str, path: str, body: Any = None, *,
         token: str | None = TOKEN, raw: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(deployment.url + path, data=data, method=method)
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            status, content, hdrs = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        status, content, hdrs = exc.code, exc.read(), dict(exc.headers)
    try:
        return status, json.loads(content), hdrs
    except ValueError:
        return status, content.decode(errors="replace"), hdrs


def cli(deployment: Deployment, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TIDEMARK_API_TOKEN", "TIDEMARK_COORDINATOR_URL")}
    env["TIDEMARK_COORDINATOR_URL"] = deployment.url
    if token is not None:
        env["TIDEMARK_API_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "tidemark.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def completed_checkpoints(participant: Participant, count: int) -> list[CheckpointCompleted]:
    participant.register()
    participant.pump(lambda: len([m for m in participant.seen if isinstance(m, CheckpointCompleted)
                                  and m.checkpoint_type is CheckpointType.CHECKPOINT]) >= count)
    return [m for m in participant.seen if isinstance(m, CheckpointCompleted)][:count]


# ---------------------------------------------------------------------- authentication


def test_bearer_token_required_refused_and_accepted(deployment: Deployment):
    status, body, headers = call(deployment, "GET", "/api/v1/jobs", token=None)
    assert (status, body["status"]) == (401, 401) and "missing bearer token" in body["error"]
    assert headers["WWW-Authenticate"].startswith("Bearer")
    status, body, headers = call(deployment, "GET", "/api/v1/jobs", token="not-the-token-at-all")
    assert status == 401 and body["error"] == "invalid bearer token"
    assert 'error="invalid_token"' in headers["WWW-Authenticate"]
    status, body, _ = call(deployment, "GET", "/api/v1/jobs", token=None,
                           headers={"Authorization": f"Basic {TOKEN}"})
    assert status == 401 and "malformed Authorization header" in body["error"]
    status, body, _ = call(deployment, "POST", "/api/v1/jobs/any/savepoints", {"stop": True}, token=TOKEN[:-1])
    assert status == 401, "a request with a wrong token does nothing, whatever it asks"
    status, body, _ = call(deployment, "GET", "/api/v1/jobs")
    assert status == 200 and isinstance(body["jobs"], list)
    for open_path in ("/livez", "/readyz", "/metrics"):
        assert call(deployment, "GET", open_path, token=None)[0] == 200, open_path


def test_cli_reports_http_failures_clearly(deployment: Deployment):
    refused = cli(deployment, "checkpoints", "history", "some-job", token="a-wrong-token-0000000")
    assert refused.returncode == 1 and "HTTP 401: invalid bearer token" in refused.stderr
    unknown = cli(deployment, "checkpoints", "history", "no-such-job")
    assert unknown.returncode == 1 and "HTTP 404: unknown job 'no-such-job'" in unknown.stderr
    usage = cli(deployment, "restore", "some-job", "--parallelism", "2")
    assert usage.returncode == 2 and "exactly one of --from-checkpoint and --from-savepoint" in usage.stderr
    down = cli(deployment, "jobs", "list", "--url", "http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot reach the coordinator" in down.stderr


# ---------------------------------------------------------------------- malformed requests


def test_malformed_requests_are_refused_with_clear_status(deployment: Deployment, participant: Participant):
    participant.register()
    job = participant.job
    deadline = time.monotonic() + 15
    while call(deployment, "GET", f"/api/v1/jobs/{job}/checkpoints")[0] != 200:
        assert time.monotonic() < deadline, "the coordinator never learned the registered job"
        time.sleep(0.2)
    cases = [
        ("POST", f"/jobs/{job}/savepoints", b"{not json", 400, "not valid JSON"),
        ("POST", f"/jobs/{job}/savepoints", b"[true]", 400, "must be a JSON object"),
        ("POST", f"/jobs/{job}/savepoints", b'{"stop": "yes"}', 400, "stop must be true or false"),
        ("POST", f"/jobs/{job}/savepoints", b'{"stop": true, "when": 1}', 400, "unknown field(s): when"),
        ("POST", f"/jobs/{job}/savepoints", b'{"target": 7}', 400, "target must be a string"),
        ("POST", f"/jobs/{job}/restore", b"", 400, "must be a JSON object"),
        ("POST", f"/jobs/{job}/restore", b'{"parallelism": 2}', 400, "exactly one of"),
        ("POST", f"/jobs/{job}/restore", b'{"checkpoint_id": 1, "savepoint_path": "a", "parallelism": 2}',
         400, "exactly one of"),
        ("POST", f"/jobs/{job}/restore", b'{"checkpoint_id": "1", "parallelism": 2}', 400, "checkpoint_id must be an integer"),
        ("POST", f"/jobs/{job}/restore", b'{"checkpoint_id": 1, "parallelism": 0}', 400, "parallelism must be"),
        ("POST", f"/jobs/{job}/restore", b'{"checkpoint_id": 1, "parallelism": true}', 400, "parallelism must be"),
        ("POST", f"/jobs/{job}/restore", b'{"checkpoint_id": 99999, "parallelism": 2}', 404, "no retained checkpoint"),
        ("GET", "/jobs/bad%24job/checkpoints", None, 400, "job id not usable"),
        ("GET", "/jobs/no-such-job/checkpoints", None, 404, "unknown job"),
        ("GET", "/jobs/no-such-job/savepoints", None, 404, "unknown job"),
        ("POST", "/jobs/no-such-job/savepoints", b"{}", 404, "unknown job"),
        ("GET", f"/jobs/{job}/savepoints/requests/0123abcd", None, 404, "no savepoint request"),
        ("GET", f"/jobs/{job}/savepoints/requests/bad%20id", None, 400, "not a savepoint request id"),
    ]
    for method, path, raw, expected, fragment in cases:
        status, body, _ = call(deployment, method, "/api/v1" + path, raw=raw)
        assert status == expected, (method, path, raw, body)
        assert body["status"] == expected and fragment in body["error"], (path, raw, body)
    status, body, _ = call(deployment, "DELETE", "/api/v1/jobs")
    assert status == 405
    oversized = b'{"target": "' + b"a" * (1024 * 1024 + 1) + b'"}'
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", raw=oversized)
    assert status == 413 and body["error"] == "Request Entity Too Large"


# ---------------------------------------------------------------------- path escapes


ESCAPES = ["../../etc/passwd", "/etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "sp/../../../etc",
           "file:///etc/passwd", "a\\..\\..\\etc", "ok/./x", "", "a//b", "..%2F..%2Fetc"]


def test_paths_outside_checkpoint_storage_are_refused(deployment: Deployment, participant: Participant,
                                                      tmp_path: Path):
    [first] = completed_checkpoints(participant, 1)
    job = participant.job
    for path in ESCAPES:
        status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", {"target": path})
        assert status == 400, (path, body)
        status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                               {"savepoint_path": path, "parallelism": 1})
        assert status == 400, (path, body)
    for path in ("/api/v1/jobs/%2e%2e/savepoints", "/api/v1/jobs/..%2F..%2Fetc/savepoints",
                 "/api/v1/jobs/%2e%2e%2f%2e%2e%2fetc/checkpoints/retained"):
        status, body, _ = call(deployment, "GET", path)
        assert status == 400 and "job id not usable" in body["error"], (path, body)
    # a symlink inside storage pointing outside it: the storage layer refuses to follow it
    outside = tmp_path / "outside"
    outside.mkdir()
    metadata = codec_metadata_of(participant, first.checkpoint_id)
    (outside / "_metadata").write_bytes(encode_metadata(metadata))
    (deployment.root / job / "escape").symlink_to(outside, target_is_directory=True)
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                           {"savepoint_path": f"{job}/escape", "parallelism": 1})
    assert status == 400 and "escapes the root" in body["error"], body
    settle_until = time.monotonic() + 1.5
    participant.pump(lambda: time.monotonic() > settle_until, ack=False)
    assert participant.find(SavepointRequest) is None, "no refused request reached the control topic"
    assert participant.find(RestoreCommand) is None


def test_a_savepoint_target_storage_would_refuse_is_refused_before_the_202(
        deployment: Deployment, participant: Participant, tmp_path: Path):
    """Issue #32: these targets were accepted (202), and the worker writing the savepoint there
    died (NotADirectoryError, or a symlink escaping the root), failing the job over. The API makes
    the check the worker makes before it writes (catalog.check_savepoint_target)."""
    completed_checkpoints(participant, 1)
    job = participant.job
    area = deployment.root / job / "savepoints"
    participant.storage.write_bytes(f"{job}/savepoints/sp-10/_metadata", b"a savepoint's metadata")
    (area / "elsewhere").mkdir()
    (area / "link").symlink_to(area / "elsewhere", target_is_directory=True)
    (area / "away").symlink_to(tmp_path, target_is_directory=True)
    refused = {
        f"{job}/savepoints/sp-10/_metadata": f"'{job}/savepoints/sp-10/_metadata' is an existing file",
        f"{job}/savepoints/sp-10/_metadata/x": f"lies under '{job}/savepoints/sp-10/_metadata', an existing file",
        f"{job}/savepoints/sp-10": f"'{job}/savepoints/sp-10' is an existing savepoint",
        f"{job}/savepoints/sp-10/inside": f"lies inside '{job}/savepoints/sp-10', an existing savepoint",
        f"{job}/savepoints/link": f"'{job}/savepoints/link' is a symlink",
        f"{job}/savepoints/link/x": f"passes through the symlink '{job}/savepoints/link'",
        f"{job}/savepoints/away/x": f"passes through the symlink '{job}/savepoints/away'",
    }
    for target, why in refused.items():
        for stop in (False, True):
            status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints",
                                   {"target": target, "stop": stop})
            assert (status, body["status"]) == (409, 409) and why in body["error"], (target, body)
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", {"target": f"{job}/chk-1"})
    assert status == 400 and "inside the job's savepoint area" in body["error"], body
    refused_cli = cli(deployment, "savepoint", "trigger", job, "--target", f"{job}/savepoints/link/x")
    assert refused_cli.returncode == 1 and refused_cli.stderr.strip().splitlines() == [
        f"error: HTTP 409: '{job}/savepoints/link/x' passes through the symlink '{job}/savepoints/link'"]
    # a free target is accepted, and it is the only request that reached the control topic
    status, accepted, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints",
                               {"target": f"{job}/savepoints/elsewhere/fine"})
    assert status == 202, accepted
    participant.wait_for(SavepointRequest)
    assert [m.target_location for m in participant.seen if isinstance(m, SavepointRequest)] == [
        f"{job}/savepoints/elsewhere/fine"]


def codec_metadata_of(participant: Participant, checkpoint_id: int) -> CheckpointMetadata:
    from tidemark.checkpoint_store import read_metadata

    path = f"{participant.job}/chk-{checkpoint_id}/_metadata"
    return read_metadata(participant.storage, path)


# ---------------------------------------------------------------------- history


def test_history_shows_completed_checkpoints_with_durations_and_sizes(deployment: Deployment,
                                                                      participant: Participant):
    completed = completed_checkpoints(participant, 2)
    job = participant.job
    status, body, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/checkpoints")
    assert status == 200 and body["job"] == job and body["counts"]["completed"] >= 2
    by_id = {e["id"]: e for e in body["checkpoints"]}
    for done in completed:
        entry = by_id[done.checkpoint_id]
        assert entry["status"] == "COMPLETED" and entry["type"] == "CHECKPOINT"
        assert entry["ended_at"] == done.completed_at
        assert entry["duration_ms"] == entry["ended_at"] - entry["triggered_at"] >= 0
        assert entry["checkpointed_size_bytes"] == participant.written[done.checkpoint_id] > 0
        assert entry["full_size_bytes"] == participant.written[done.checkpoint_id]
        assert entry["num_acknowledged"] == entry["num_tasks"] == 2
        assert entry["metadata_path"] == f"{job}/chk-{done.checkpoint_id}/_metadata"
    ids = [e["id"] for e in body["checkpoints"]]
    assert ids == sorted(ids, reverse=True), "newest first"

    status, retained, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/checkpoints/retained")
    assert status == 200
    kept = {e["id"]: e for e in retained["checkpoints"]}
    assert {c.checkpoint_id for c in completed} <= set(kept)
    assert kept[completed[0].checkpoint_id]["checkpointed_size_bytes"] == participant.written[completed[0].checkpoint_id]

    text = cli(deployment, "checkpoints", "history", job)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[1].split() == ["ID", "TYPE", "STATUS", "TRIGGERED", "DURATION", "CHECKPOINTED",
                                "FULL", "SIZE", "ACKED", "FAILURE"]
    row = next(line.split() for line in lines[2:] if line.split()[0] == str(completed[0].checkpoint_id))
    size = participant.written[completed[0].checkpoint_id]
    assert row[1:3] == ["CHECKPOINT", "COMPLETED"] and f"{size}" in row and row.count("B") == 2
    as_json = cli(deployment, "checkpoints", "history", job, "--json")
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["job"] == job
    listed = cli(deployment, "checkpoints", "list", job)
    assert listed.returncode == 0 and f"{job}/chk-{completed[0].checkpoint_id}/_metadata" in listed.stdout


# ---------------------------------------------------------------------- savepoints


def test_savepoint_through_the_api_completes_and_is_listed(deployment: Deployment, participant: Participant):
    completed_checkpoints(participant, 1)
    job = participant.job
    status, accepted, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", {"stop": False})
    assert status == 202 and accepted["status"] == "PENDING" and accepted["savepoint_id"] is None
    request_id = accepted["request_id"]
    status, pending, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/savepoints/requests/{request_id}")
    assert status == 200 and pending["status"] in ("PENDING", "IN_PROGRESS")
    done = participant.wait_for(CheckpointCompleted, lambda m: m.checkpoint_type is CheckpointType.SAVEPOINT)
    status, finished, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/savepoints/requests/{request_id}")
    assert status == 200 and finished["status"] == "COMPLETED"
    assert finished["savepoint_id"] == done.checkpoint_id
    assert finished["metadata_path"] == f"{job}/savepoints/sp-{done.checkpoint_id}/_metadata"
    status, listing, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/savepoints")
    assert status == 200 and [s["id"] for s in listing["savepoints"]] == [done.checkpoint_id]
    assert listing["savepoints"][0]["checkpointed_size_bytes"] == participant.written[done.checkpoint_id]
    listed = cli(deployment, "savepoints", "list", job)
    assert listed.returncode == 0 and finished["metadata_path"] in listed.stdout

    # the CLI's trigger --wait returns once the participant has acked its savepoint
    env = {**os.environ, "TIDEMARK_COORDINATOR_URL": deployment.url, "TIDEMARK_API_TOKEN": TOKEN}
    process = subprocess.Popen([sys.executable, "-m", "tidemark.cli", "savepoint", "trigger", job,
                                "--wait", "--timeout", "60", "--json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        participant.pump(lambda: process.poll() is not None, timeout_s=60)
    finally:
        if process.poll() is None:
            process.kill()
    out, err = process.communicate()
    assert process.returncode == 0, err
    result = json.loads(out)
    assert result["status"] == "COMPLETED" and result["savepoint_id"] > done.checkpoint_id
    status, listing, _ = call(deployment, "GET", f"/api/v1/jobs/{job}/savepoints")
    assert [s["id"] for s in listing["savepoints"]] == [done.checkpoint_id, result["savepoint_id"]]

    # restoring from the savepoint's directory, at a new parallelism
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                           {"savepoint_path": f"{job}/savepoints/sp-{done.checkpoint_id}", "parallelism": 4})
    assert status == 202 and body["is_savepoint"] and body["parallelism"] == 4
    command = participant.wait_for(RestoreCommand, lambda m: m.restore_id == body["restore_id"], ack=False)
    assert command.metadata_path == f"{job}/savepoints/sp-{done.checkpoint_id}/_metadata"
    assert command.assignments == plan_assignments((OPERATOR,), 4, MAX_PARALLELISM)


def test_concurrent_savepoint_requests_each_end_completed_or_failed_with_a_reason(deployment: Deployment,
                                                                                   participant: Participant):
    """Five requests at once, one of them a stop-with-savepoint: the coordinator triggers one
    savepoint at a time in request order; those queued behind the stop fail when the job stops."""
    completed_checkpoints(participant, 1)
    job = participant.job
    bodies = [{"stop": False}] * 4 + [{"stop": True}]
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        answers = list(pool.map(lambda body: call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", body),
                                bodies))
    assert [status for status, _, _ in answers] == [202] * len(bodies), answers
    requests = {accepted["request_id"]: accepted["stop"] for _, accepted, _ in answers}
    documents: dict[str, Any] = {}
    last_poll = [0.0]

    def all_settled() -> bool:
        if time.monotonic() - last_poll[0] < 0.5:
            return False
        last_poll[0] = time.monotonic()
        for request_id in requests:
            status, documents[request_id], _ = call(
                deployment, "GET", f"/api/v1/jobs/{job}/savepoints/requests/{request_id}")
            assert status == 200
        return all(d["status"] in ("COMPLETED", "FAILED") for d in documents.values())

    participant.pump(all_settled, timeout_s=60)
    [stop] = [d for d in documents.values() if d["stop"]]
    assert stop["status"] == "COMPLETED", stop
    for document in documents.values():
        if document["status"] == "FAILED":
            assert document["failure_reason"], document
        if document["savepoint_id"] is None:  # queued behind the stop: never triggered
            assert document["failure_reason"] == (f"the job stopped with savepoint {stop['savepoint_id']} "
                                                  f"before this request was triggered"), document
        else:
            assert document["savepoint_id"] <= stop["savepoint_id"], document
    ids = [d["savepoint_id"] for d in documents.values() if d["savepoint_id"] is not None]
    assert len(ids) == len(set(ids))  # every triggered request had its own savepoint
    status, late, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/savepoints", {"stop": False})
    assert status == 202
    participant.pump(lambda: call(deployment, "GET", f"/api/v1/jobs/{job}/savepoints/requests/"
                                  f"{late['request_id']}")[1]["status"] == "FAILED", timeout_s=30)


# ---------------------------------------------------------------------- restore


def test_a_restore_guarded_by_newest_seen_is_refused_after_a_newer_checkpoint_completed(
        deployment: Deployment, participant: Participant):
    """A supervisor's failover sends the newest id it saw: restoring an older checkpoint than
    one completed meanwhile (whose output the running attempt may have committed) is a 409,
    changes nothing, and goes through once the newer one was seen."""
    first, second = completed_checkpoints(participant, 2)
    job = participant.job
    guarded = {"checkpoint_id": first.checkpoint_id, "parallelism": 2, "newest_seen": first.checkpoint_id}
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore", guarded)
    assert status == 409, body
    assert f"checkpoint {second.checkpoint_id} of job {job} completed after the restore source was chosen" \
        in body["error"], body
    status, jobs, _ = call(deployment, "GET", "/api/v1/jobs")
    assert next(j for j in jobs["jobs"] if j["job"] == job)["counts"]["restored"] == 0
    newest = max(m.checkpoint_id for m in participant.seen if isinstance(m, CheckpointCompleted))
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                           {**guarded, "checkpoint_id": newest, "newest_seen": newest})
    assert status == 202 and body["checkpoint_id"] == newest, body


class _CheckpointCompletingWhileChosen:
    """The job's real checkpoint storage, except that the first state file read (a restore
    source being verified, after the planner listed and chose it) first lets the running
    participant complete one more checkpoint: the race of a supervisor restarted beside a
    running attempt, made certain."""

    def __init__(self, participant: Participant) -> None:
        self._storage, self._participant, self.completed_meanwhile = participant.storage, participant, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def read_verified(self, ref: Any) -> bytes:
        if self.completed_meanwhile is None:
            before = len(_completed(self._participant))
            self._participant.pump(lambda: len(_completed(self._participant)) > before)
            self.completed_meanwhile = _completed(self._participant)[-1].checkpoint_id
        return self._storage.read_verified(ref)


def _completed(participant: Participant) -> list[CheckpointCompleted]:
    return [m for m in participant.seen if isinstance(m, CheckpointCompleted)]


def test_a_supervisor_resuming_beside_a_running_attempt_restores_no_older_checkpoint_than_one_completed(
        deployment: Deployment, participant: Participant):
    """The planner chose checkpoint N and, while it verified N, the running attempt completed
    N+1 (whose output its sinks may commit). Its guarded restore of N is refused, it chooses
    again and restores N+1 (or newer); no checkpoint newer than the restored one is announced,
    before the restore or after it."""
    completed_checkpoints(participant, 2)
    storage = _CheckpointCompletingWhileChosen(participant)
    settings = TidemarkSettings(bootstrap_servers=deployment.bootstrap, topic_prefix=deployment.topics.prefix,
                                checkpoint_storage_url=deployment.storage_url)
    spec = url_counts(job_id=participant.job)
    spec = dataclasses.replace(spec, stages=(dataclasses.replace(spec.stages[0], name=OPERATOR),))  # the participant's
    planner = AttemptPlanner(settings, RunOptions(ACCESS_LOG_COUNTS), CoordinatorClient(deployment.url, TOKEN),
                             spec, storage)
    attempt = planner.first()
    assert storage.completed_meanwhile is not None  # while checkpoint N was verified
    assert attempt.restored_id is not None and attempt.restored_id >= storage.completed_meanwhile, attempt
    participant.pump(lambda: participant.find(RestoreCommand) is not None)
    quiet_until = time.monotonic() + 3.0
    participant.pump(lambda: time.monotonic() > quiet_until)  # the old attempt acks what it is sent
    newer = [m.checkpoint_id for m in _completed(participant) if m.checkpoint_id > attempt.restored_id]
    assert newer == [], (attempt.restored_id, newer)


def test_restore_publishes_a_restore_command_with_the_new_assignments(deployment: Deployment,
                                                                      participant: Participant):
    [first] = completed_checkpoints(participant, 1)
    job = participant.job
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                           {"checkpoint_id": first.checkpoint_id, "parallelism": MAX_PARALLELISM + 1})
    assert status == 422 and f"1..{MAX_PARALLELISM}" in body["error"]
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{job}/restore",
                           {"checkpoint_id": first.checkpoint_id, "parallelism": 3})
    assert status == 202, body
    assert (body["checkpoint_id"], body["parallelism"], body["epoch"]) == (first.checkpoint_id, 3, 2)
    command = participant.wait_for(RestoreCommand, lambda m: m.restore_id == body["restore_id"], ack=False)
    expected = plan_assignments((OPERATOR,), 3, MAX_PARALLELISM)
    assert command.assignments == expected and len(expected) == 3
    assert [(a.key_group_start, a.key_group_end) for a in expected] == [(0, 42), (43, 85), (86, 127)]
    assert (command.parallelism, command.max_parallelism, command.epoch) == (3, MAX_PARALLELISM, 2)
    assert command.metadata_path == f"{job}/chk-{first.checkpoint_id}/_metadata"
    assert not command.is_savepoint

    # another job's metadata cannot restore this one
    other = f"{job}-other"
    foreign = codec_metadata_of(participant, first.checkpoint_id)
    participant.storage.write_bytes(f"{other}/savepoints/sp-1/_metadata", encode_metadata(foreign))
    status, body, _ = call(deployment, "POST", f"/api/v1/jobs/{other}/restore",
                           {"savepoint_path": f"{other}/savepoints/sp-1", "parallelism": 2})
    assert status == 422 and f"belongs to job {job!r}" in body["error"]

    result = cli(deployment, "restore", job, "--from-checkpoint", str(first.checkpoint_id), "--parallelism", "2")
    assert result.returncode == 0, result.stderr
    assert f"from checkpoint {first.checkpoint_id}" in result.stdout and "epoch 3" in result.stdout
    assert f"{OPERATOR}#1" in result.stdout and "64..127" in result.stdout
    second = participant.wait_for(RestoreCommand, lambda m: m.epoch == 3, ack=False)
    assert second.assignments == plan_assignments((OPERATOR,), 2, MAX_PARALLELISM)
    status, jobs, _ = call(deployment, "GET", "/api/v1/jobs")
    mine = next(j for j in jobs["jobs"] if j["job"] == job)
    assert mine["epoch"] == 3 and mine["counts"]["restored"] == 2
