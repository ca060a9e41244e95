"""The coordinator's OpenAPI description (``openapi.yaml``, served at ``/openapi.json``) against
the running coordinator on the real broker, both ways: every described operation is called and
answers a described status with a body of the described schema, and every route the server
has is described (Faust's built-in pages excepted, named below)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from tidemark.checkpoint import plan_assignments
from tidemark.checkpoint_store import encode_metadata
from tidemark.checkpoint_store.layout import metadata_path
from tidemark.config.settings import load_settings
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.protocol import codec
from tidemark.protocol.messages import CheckpointMetadata, JobRegistration, TaskSnapshot
from tidemark.services.coordinator.app import SETTINGS, build
from tidemark.services.coordinator.rest_api import openapi_document
from tidemark.runtime.supervisor.heartbeat import SupervisorHeartbeats
from tidemark.examples.access_log import url_counts
from tidemark.testing.harness import KeyedProcessFunctionHarness
from state_query_worker import StateQueryWorker
from tidemark.storage import open_storage
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, OperatorId

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKEN = "openapi-test-token-5d1e0b7c"
JOB = JobId("openapi-job")
ENDED = JobId("openapi-ended")  # a cancelled job with a retained checkpoint, which an operator discards
OPERATOR = OperatorId("count_hits")
SPEC = openapi_document()
METHODS = ("get", "post", "put", "patch", "delete")
FAUST_BUILTIN = {  # Faust's index page (the chassis switches its router and table pages off); needs the token
    ("GET", "/")}
REGISTRY = Registry().with_resource("urn:tidemark-openapi",
                                    Resource.from_contents(SPEC, default_specification=DRAFT202012))


@dataclass
class Server:
    url: str
    env: dict[str, str]
    called: dict[tuple[str, str], set[int]] = field(default_factory=dict)

    def call(self, method: str, template: str, path: str | None = None, body: Any = None, *,
             token: str | None = TOKEN) -> tuple[int, Any]:
        """Call ``path`` (default: ``template``) and check the answer against the description of
        ``template``/``method``: a described status, and a body of that status's schema."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        request = urllib.request.Request(self.url + (path or template), data=data, method=method)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, content_type, raw = response.status, response.headers.get_content_type(), response.read()
        except urllib.error.HTTPError as exc:
            status, content_type, raw = exc.code, exc.headers.get_content_type(), exc.read()
        operation = SPEC["paths"][template][method.lower()]
        described = operation["responses"]
        assert str(status) in described, f"{method} {path or template}: {status} is not described: {raw[:300]!r}"
        self.called.setdefault((method.upper(), template), set()).add(status)
        response_spec = described[str(status)]
        if "$ref" in response_spec:
            response_spec = SPEC["components"]["responses"][response_spec["$ref"].rsplit("/", 1)[1]]
        (described_type, media), = response_spec["content"].items()
        assert content_type == described_type, f"{method} {path or template}: {content_type} != {described_type}"
        document = json.loads(raw) if described_type == "application/json" else raw.decode()
        validator = Draft202012Validator({"$ref": "urn:tidemark-openapi#" + _pointer(media["schema"])},
                                         registry=REGISTRY)
        errors = sorted(validator.iter_errors(document), key=str)
        assert not errors, f"{method} {path or template} {status}: {errors[0].message} in {document}"
        if isinstance(document, dict) and "error" in document:
            assert document["status"] == status
        return status, document


def _pointer(schema: dict[str, Any]) -> str:
    """The JSON pointer of an inline schema within the spec, or its $ref target."""
    if "$ref" in schema and len(schema) == 1:
        return schema["$ref"][1:]
    for template, item in SPEC["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status, response in operation["responses"].items():
                for media_type, media in response.get("content", {}).items():
                    if media["schema"] is schema:
                        escaped = template.replace("~", "~0").replace("/", "~1")
                        return f"/paths/{escaped}/{method}/responses/{status}/content/{media_type.replace('/', '~1')}/schema"
    raise AssertionError(f"schema not found in the spec: {schema}")


@pytest.fixture(scope="module")
def server(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("openapi")
    storage_url = (home / "checkpoints").as_uri()
    topics = TopicNames(prefix=f"t-openapi-{uuid.uuid4().hex[:8]}")
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_API_TOKEN": TOKEN,
           "TIDEMARK_CHECKPOINT__INTERVAL_MS": "600000", "TIDEMARK_JOBS__LAUNCHER": "local"}
    with LocalCluster(home, kafka_bootstrap, topic_prefix=topics.prefix, env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=90)
        coordinator = cluster.services["coordinator"]
        heartbeats = SupervisorHeartbeats({"bootstrap.servers": kafka_bootstrap}, topics, JOB, lambda: 1).start()
        _register(kafka_bootstrap, topics)
        _store_checkpoint(storage_url)
        result = Server(coordinator.url, coordinator.env)
        deadline = time.monotonic() + 30
        while not any(j["job"] == JOB for j in result.call("GET", "/api/v1/jobs")[1].get("jobs", ())):  # 503: replaying
            assert time.monotonic() < deadline, "the coordinator did not see the registration"
            time.sleep(0.2)
        # the job's two tasks of count_hits, as its worker holds them, answering live state queries
        with KeyedProcessFunctionHarness.for_stage(url_counts(job_id=JOB), OPERATOR) as harness:
            harness.process({"url": "/a"})
            worker = StateQueryWorker(kafka_bootstrap, topics, JOB, OPERATOR, harness.tasks).start()
            asked = f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/hits?key=%2Fa"
            while result.call("GET", "/api/v1/jobs/{job}/stages/{stage}/state/{name}", asked)[0] == 409:
                assert time.monotonic() < deadline + 30, "the worker's control plane never answered"
            try:
                yield result
            finally:
                worker.stop()
        heartbeats.stop()


def _register(bootstrap: str, topics: TopicNames) -> None:
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}))
    tasks = plan_assignments((OPERATOR,), 2, 128)
    registration = JobRegistration(JOB, Epoch(1), CheckpointingMode.EXACTLY_ONCE, 128, tasks,
                                   tuple(t.task_id for t in tasks), int(time.time() * 1000), workers=(0, 1))
    producer.produce(topics.control, key=JOB.encode(), value=codec.encode(registration))
    ended = JobRegistration(ENDED, Epoch(1), CheckpointingMode.EXACTLY_ONCE, 128, tasks, registration.source_tasks,
                            int(time.time() * 1000), finished=True, outcome="CANCELLED", workers=(0, 1))
    snapshots = tuple(TaskSnapshot(t.task_id, OPERATOR, t.subtask_index, t.key_group_start, t.key_group_end)
                      for t in tasks)
    persist = CheckpointMetadata(ENDED, CheckpointId(3), CheckpointType.CHECKPOINT, 1000, 1500, 128, snapshots,
                                 Epoch(1))  # on the control topic: the request the checkpoint-store carries out
    for record in (ended, persist):
        producer.produce(topics.control, key=ENDED.encode(), value=codec.encode(record))
    producer.flush(10)


def _store_checkpoint(storage_url: str) -> None:
    """A retained checkpoint 1 in storage, as the checkpoint-store would have written it."""
    tasks = tuple(TaskSnapshot(t.task_id, OPERATOR, t.subtask_index, t.key_group_start, t.key_group_end)
                  for t in plan_assignments((OPERATOR,), 2, 128))
    metadata = CheckpointMetadata(JOB, CheckpointId(1), CheckpointType.CHECKPOINT, 1000, 1500, 128, tasks,
                                  Epoch(1))
    open_storage(storage_url).write_bytes(metadata_path(JOB, CheckpointId(1), CheckpointType.CHECKPOINT),
                                          encode_metadata(metadata))


def test_the_served_description_is_the_file(server: Server) -> None:
    status, document = server.call("GET", "/openapi.json", token=None)
    assert document == json.loads(json.dumps(SPEC))
    Draft202012Validator.check_schema({"$ref": "urn:tidemark-openapi#/components/schemas/Run"})


def test_every_described_operation_answers_as_described(server: Server) -> None:
    call = server.call
    assert call("GET", "/openapi.json", token=None)[0] == 200
    assert call("GET", "/livez", token=None)[0] == 200
    assert call("GET", "/readyz", token=None)[0] == 200
    assert "<svg" not in call("GET", "/ui/checkpoints")[1] and call("GET", "/ui/checkpoints", token=None)[0] == 401
    assert "tidemark_" in call("GET", "/metrics", token=None)[1]

    jobs = "/api/v1/jobs"
    history = "/api/v1/jobs/{job}/checkpoints"
    retained = "/api/v1/jobs/{job}/checkpoints/retained"
    savepoints = "/api/v1/jobs/{job}/savepoints"
    request = "/api/v1/jobs/{job}/savepoints/requests/{request_id}"
    restore = "/api/v1/jobs/{job}/restore"
    runs, run = "/api/v1/runs", "/api/v1/runs/{run_id}"
    state = "/api/v1/jobs/{job}/stages/{stage}/state/{name}"

    status, listing = call("GET", jobs)
    assert status == 200
    (shown,) = [j["workers"] for j in listing["jobs"] if j["job"] == JOB]
    assert shown == {OPERATOR: [[f"{OPERATOR}#0"], [f"{OPERATOR}#1"]]}  # two workers, one task each
    assert call("GET", history, f"/api/v1/jobs/{JOB}/checkpoints")[0] == 200
    status, value = call("GET", state, f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/hits?key=%2Fa")
    assert status == 200 and value["value"] == 1 and value["key"] == "/a"
    assert call("GET", state, f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/hits?key=%2Fnever")[0] == 404
    assert call("GET", state, f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/visits?key=%2Fa")[0] == 404
    assert call("GET", state, f"/api/v1/jobs/{JOB}/stages/nope/state/hits?key=%2Fa")[0] == 404
    assert call("GET", state, f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/hits")[0] == 400
    assert call("GET", state, f"/api/v1/jobs/{JOB}/stages/{OPERATOR}/state/hits?key=1&key_type=float")[0] == 400
    assert call("GET", state, f"/api/v1/jobs/{ENDED}/stages/{OPERATOR}/state/hits?key=%2Fa")[0] == 409
    assert call("GET", state, f"/api/v1/jobs/nobody/stages/{OPERATOR}/state/hits?key=%2Fa")[0] == 404
    assert call("GET", history, "/api/v1/jobs/nobody/checkpoints")[0] == 404
    assert call("GET", history, "/api/v1/jobs/a%2F..%2Fb/checkpoints")[0] == 400
    status, document = call("GET", retained, f"/api/v1/jobs/{JOB}/checkpoints/retained")
    assert status == 200 and [c["id"] for c in document["checkpoints"]] == [1]
    assert call("GET", savepoints, f"/api/v1/jobs/{JOB}/savepoints")[0] == 200
    assert call("GET", savepoints, "/api/v1/jobs/nobody/savepoints")[0] == 404

    status, requested = call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", {"stop": False})
    assert status == 202 and requested["status"] == "PENDING"
    assert call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", b"")[0] == 202  # empty body: {}
    assert call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", {"stop": "yes"})[0] == 400
    assert call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", {"target": "../x"})[0] == 400
    open_storage(server.env["TIDEMARK_CHECKPOINT_STORAGE_URL"]).write_bytes(f"{JOB}/savepoints/taken", b"a file")
    assert call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", {"target": f"{JOB}/savepoints/taken"})[0] == 409
    assert call("POST", savepoints, "/api/v1/jobs/nobody/savepoints", {})[0] == 404
    assert call("POST", savepoints, f"/api/v1/jobs/{JOB}/savepoints", b"x" * (1 << 20 | 1))[0] == 413
    assert call("GET", request, f"/api/v1/jobs/{JOB}/savepoints/requests/{requested['request_id']}")[0] == 200
    detail = "/api/v1/jobs/{job}/checkpoints/{checkpoint_id}"
    deadline = time.monotonic() + 30
    while (savepoint_id := call("GET", request, f"/api/v1/jobs/{JOB}/savepoints/requests/"
                                                f"{requested['request_id']}")[1]["savepoint_id"]) is None:
        assert time.monotonic() < deadline, "the coordinator did not trigger the savepoint"
        time.sleep(0.2)
    status, document = call("GET", detail, f"/api/v1/jobs/{JOB}/checkpoints/{savepoint_id}")
    assert status == 200 and document["checkpoint"]["id"] == savepoint_id and document["acks"] == []
    assert call("GET", detail, f"/api/v1/jobs/{JOB}/checkpoints/999999")[0] == 404
    assert call("GET", detail, f"/api/v1/jobs/{JOB}/checkpoints/0")[0] == 400
    assert call("GET", request, f"/api/v1/jobs/{JOB}/savepoints/requests/unknown")[0] == 404
    assert call("GET", request, f"/api/v1/jobs/{JOB}/savepoints/requests/bad%20id")[0] == 400

    assert call("DELETE", detail, f"/api/v1/jobs/{JOB}/checkpoints/1")[0] == 409  # the job runs
    assert call("DELETE", detail, "/api/v1/jobs/nobody/checkpoints/1")[0] == 404
    ended_retained = f"/api/v1/jobs/{ENDED}/checkpoints/retained"
    while not call("GET", retained, ended_retained)[1]["checkpoints"]:
        assert time.monotonic() < deadline + 30, "the checkpoint-store did not store checkpoint 3"
        time.sleep(0.2)
    status, discarded = call("DELETE", detail, f"/api/v1/jobs/{ENDED}/checkpoints/3")
    assert status == 200 and discarded == {"job": ENDED, "discarded": 3, "newest_completed": None}
    assert call("GET", retained, ended_retained)[1]["checkpoints"] == []
    assert call("DELETE", detail, f"/api/v1/jobs/{ENDED}/checkpoints/3")[0] == 404

    status, command = call("POST", restore, f"/api/v1/jobs/{JOB}/restore", {"checkpoint_id": 1, "parallelism": 4})
    assert status == 202 and len(command["assignments"]) == 4 and command["epoch"] == 2
    assert call("POST", restore, f"/api/v1/jobs/{JOB}/restore", {"checkpoint_id": 9, "parallelism": 2})[0] == 404
    assert call("POST", restore, f"/api/v1/jobs/{JOB}/restore", {"checkpoint_id": 1, "parallelism": 999})[0] == 422
    assert call("POST", restore, f"/api/v1/jobs/{JOB}/restore", {"parallelism": 2})[0] == 400

    assert call("GET", runs)[0] == 200
    assert call("POST", runs, body={"job": "os:system"})[0] == 403
    assert call("POST", runs, body={"job": "tidemark.examples.access_log:url_counts",
                                    "args": {"parallelism": "two"}})[0] == 422
    assert call("POST", runs, body={"job": "tidemark.examples.access_log:url_counts",
                                    "from_checkpoint": 5, "args": {"job_id": "no-such-job"}})[0] == 404
    assert call("POST", runs, body=[1])[0] == 400
    assert call("GET", run, "/api/v1/runs/" + "0" * 32)[0] == 404
    assert call("GET", run, "/api/v1/runs/XYZ")[0] == 400
    assert call("DELETE", run, "/api/v1/runs/" + "0" * 32)[0] == 404

    status, started = call("POST", runs, body={"job": "tidemark.examples.access_log:url_counts",
                                               "args": {"job_id": "openapi-run", "input_topic": "openapi-in"}})
    assert status == 202 and started["status"] == "RUNNING"
    path = f"/api/v1/runs/{started['run_id']}"
    assert call("POST", runs, body={"job": "tidemark.examples.access_log:url_counts",
                                    "args": {"job_id": "openapi-run"}})[0] == 409
    assert call("DELETE", run, path)[0] == 202
    deadline = time.monotonic() + 60
    while call("GET", run, path)[1]["status"] == "RUNNING":
        assert time.monotonic() < deadline, "the cancelled run did not exit"
        time.sleep(0.5)
    assert call("DELETE", run, path)[0] == 409
    assert [r["run_id"] for r in call("GET", runs)[1]["runs"]] == [started["run_id"]]

    for template, item in SPEC["paths"].items():  # without the token
        for method in METHODS:
            if method in item and template.startswith("/api/v1/"):
                concrete = template.format(job=JOB, request_id="r1", run_id="0" * 32, checkpoint_id=1,
                                           stage=OPERATOR, name="hits")
                status, _ = call(method.upper(), template, concrete, {} if method == "post" else None, token=None)
                assert status == 401

    described = {(m.upper(), t) for t, item in SPEC["paths"].items() for m in METHODS if m in item}
    assert described == set(server.called)
    for key in described:  # each operation answered with one of its success statuses at least once
        successes = {int(s) for s in SPEC["paths"][key[1]][key[0].lower()]["responses"] if s.startswith("2")}
        assert server.called[key] & successes, f"{key}: no success among {server.called[key]}"


def test_every_route_the_server_has_is_described(server: Server, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """The route table of the coordinator as built with the running server's settings."""
    for name, value in server.env.items():
        if name.startswith(("TIDEMARK_", "KAFKA_")):
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))
    app = build(load_settings(SETTINGS))
    app.faust.web.init_server()
    served = {(route.method, route.resource.canonical) for route in app.faust.web.web_app.router.routes()
              if route.method != "HEAD" and route.resource is not None}
    described = {(m.upper(), t) for t, item in SPEC["paths"].items() for m in METHODS if m in item}
    assert served - described == FAUST_BUILTIN
    assert described - served == set()
