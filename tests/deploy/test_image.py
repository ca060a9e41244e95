"""The images, built from the repository's Dockerfiles and run: the coordinator, the checkpoint-store
and a job's worker each start from their own image against the test's broker, as the Helm chart's
pods run them (the image's user, a read-only root filesystem, writable only at /tmp and the
image's volumes); each answers /readyz, the job completes a checkpoint into the volume the three
share, every process of every container runs as uid 10001, and nothing outside /tmp and the
volumes can be written.

The build (``scripts/image.sh``: buildah, on a Debian base made with debootstrap when no registry
is reachable) is cached between runs on one machine; a first build takes about ten minutes, so
this file runs in ``make test-image`` (``.ci/run`` runs it after ``make test``), not in
``make test``."""

from __future__ import annotations

import errno
import json
import os
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from image_support import (CHECKPOINTS_MOUNT, IMAGE_UID, STATE_MOUNT, Container, build_images, podman,
                           remove_leftovers, start_container, volume_dir)
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.examples.generator import RecordWriter, generate
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.pipeline import wait_for
from tidemark.local.quick_start import QUICK_START_ENV
from tidemark.processes import free_port, free_port_block

pytestmark = [
    pytest.mark.skipif(os.environ.get("PYTEST_IMAGE_TEST") != "1",
                       reason="builds and runs the images: `make test-image` (PYTEST_IMAGE_TEST=1)"),
    pytest.mark.timeout(2400),  # a first build included
]

TOKEN = "image-test-token-5d0c1e"
TOP_URLS = "tidemark.examples.access_log:top_urls"
IMAGE_CACHE = "/opt/tidemark/cache"  # TIDEMARK_CACHE_DIR in the Dockerfile: the connector's jars, the class archive
STAGES = 2  # top_urls: minute_counts -> top_urls; stage i serves its metrics on the worker's port + 1 + i
SPARK_STAGES = 1  # minute_counts reads the job's input with Spark; top_urls reads its channel in process, no JVM

# Run in a container: what writing to each path does, as the container's user.
PROBE_WRITES = """
import json, os, sys
outcome = {}
for directory in sys.argv[1:]:
    try:
        with open(os.path.join(directory, ".image-test-probe"), "w") as probe:
            probe.write("x")
        os.unlink(os.path.join(directory, ".image-test-probe"))
        outcome[directory] = 0
    except OSError as exc:
        outcome[directory] = exc.errno
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "writes": outcome}))
"""
READ_ONLY_PATHS = ("/", "/etc", "/usr", "/opt/tidemark", "/opt/tidemark/app", IMAGE_CACHE,
                   "/var/lib/tidemark")  # the last one the image's user owns
WRITABLE_PATHS = ("/tmp", STATE_MOUNT, CHECKPOINTS_MOUNT)


@dataclass
class Deployment:
    coordinator: Container
    checkpoint_store: Container
    worker: Container
    job_id: str
    checkpoints_dir: Path

    def containers(self) -> dict[str, Container]:
        return {"coordinator": self.coordinator, "checkpoint-store": self.checkpoint_store, "worker": self.worker}


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _ready(container: Container, what: str, timeout_s: float) -> None:
    try:
        wait_for(lambda: _get(container.http_port, "/readyz")[0] == 200, timeout_s, f"{what}'s /readyz", poll_s=1.0)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; running: {container.running()}; log:\n{container.logs()}") from None


def _completed_checkpoints(client: CoordinatorClient, job_id: str) -> int:
    try:
        return sum(j["counts"]["completed"] for j in client.jobs()["jobs"] if j["job"] == job_id)
    except ApiError:
        return 0


def _proc_files(pids: list[int], name: str) -> dict[int, str]:
    """``/proc/<pid>/<name>`` of each of ``pids`` that still runs (a short-lived child may be gone)."""
    texts = {}
    for pid in pids:
        try:
            texts[pid] = Path(f"/proc/{pid}/{name}").read_bytes().decode()
        except (FileNotFoundError, ProcessLookupError):
            continue
    return texts


def _command_lines(pids: list[int]) -> dict[int, list[str]]:
    return {pid: text.split("\0") for pid, text in _proc_files(pids, "cmdline").items() if text}


def _statuses(pids: list[int]) -> dict[int, dict[str, str]]:
    return {pid: dict(line.split(":", 1) for line in text.splitlines())
            for pid, text in _proc_files(pids, "status").items()}


@pytest.fixture(scope="module")
def images() -> dict[str, str]:
    return build_images()


@pytest.fixture(scope="module")
def deployment(images: dict[str, str], kafka_bootstrap: str,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """The three containers, the worker running the two-stage example job on generated input, as
    the chart's worker runs it (``--job-args``, ``--max-restarts``; no warm standby, to spare the
    2-core machine a JVM per stage; the quick-start settings, as the chart tests' ``extraEnv``)."""
    remove_leftovers()
    run = uuid.uuid4().hex[:8]
    root = tmp_path_factory.mktemp("image-deployment")
    checkpoints = volume_dir(root / "checkpoints")  # one claim for all three, as the chart's
    topics = {"job_id": f"image-{run}-job", "input_topic": f"image-{run}-access-log",
              "channel_topic": f"image-{run}-minute-counts", "output_topic": f"image-{run}-top-urls"}
    common = {"KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TIDEMARK_TOPIC_PREFIX": f"image-{run}",
              "TIDEMARK_KAFKA__REPLICATION_FACTOR": "1", "TIDEMARK_API_TOKEN": TOKEN,
              "TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000"}
    started: list[Container] = []

    def start(component: str, port: int, env: dict[str, str], args: list[str] | None = None) -> Container:
        container = start_container(images[component], f"tidemark-image-test-{run}-{component}", http_port=port,
                                    env={**common, **env}, state_dir=volume_dir(root / component / "state"),
                                    checkpoints_dir=checkpoints, args=args)
        started.append(container)
        return container

    try:
        coordinator = start("coordinator", free_port(), {})
        checkpoint_store = start("checkpoint-store", free_port(), {})
        _ready(coordinator, "the coordinator", 180)
        _ready(checkpoint_store, "the checkpoint-store", 180)
        ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topics["input_topic"], 4)])
        with RecordWriter(kafka_bootstrap) as writer:
            writer.write(topics["input_topic"], list(generate(1000, seed=11, per_minute=250)), 4, chunk=500)
        worker_env = {**QUICK_START_ENV, "TIDEMARK_COORDINATOR_URL": f"http://127.0.0.1:{coordinator.http_port}",
                      "HOME": "/tmp", "SPARK_LOCAL_DIRS": f"{STATE_MOUNT}/spark"}  # as the chart's worker
        worker_args = ["jobs", "run", TOP_URLS, "--job-args", json.dumps(topics, separators=(",", ":")),
                       "--max-restarts", "10", "--no-standby"]
        worker = start("worker", free_port_block(1 + STAGES), worker_env, worker_args)
        _ready(worker, "the worker's supervisor", 300)  # an attempt runs: every stage started
        yield Deployment(coordinator, checkpoint_store, worker, topics["job_id"], checkpoints)
    finally:
        for container in reversed(started):  # the worker first: its supervisor stops its stages
            container.remove()


def test_each_component_answers_readyz_from_its_image(deployment: Deployment) -> None:
    for name, container in deployment.containers().items():
        code, body = _get(container.http_port, "/readyz")
        assert code == 200, (name, body)
        if name != "worker":
            assert json.loads(body)["service"] == name
        assert container.inspect()["ImageName"].split("/")[-1].startswith(f"tidemark-{name}:")
        health = podman("healthcheck", "run", container.name, check=False)  # the image's HEALTHCHECK
        assert health.returncode == 0, (name, health.stdout, health.stderr)


def test_the_job_completes_a_checkpoint_into_the_shared_volume(deployment: Deployment) -> None:
    client = CoordinatorClient(f"http://127.0.0.1:{deployment.coordinator.http_port}", TOKEN, timeout_s=10)
    try:
        wait_for(lambda: _completed_checkpoints(client, deployment.job_id) >= 1, 300, "a completed checkpoint",
                 poll_s=1.0)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; worker log:\n{deployment.worker.logs(80)}") from None
    metadata = list(deployment.checkpoints_dir.rglob("_metadata"))
    assert metadata, sorted(str(p) for p in deployment.checkpoints_dir.rglob("*"))[:40]
    assert {path.stat().st_uid for path in metadata} == {IMAGE_UID}


def test_every_process_of_every_container_runs_as_uid_10001(deployment: Deployment) -> None:
    for name, container in deployment.containers().items():
        pids = container.processes()
        # tini and the service; the worker: tini, the supervisor, a worker per stage and the JVMs of
        # the stages that read the job's input
        assert len(pids) >= (2 + STAGES + SPARK_STAGES if name == "worker" else 2), (name, pids)
        for pid, status in _statuses(pids).items():
            uids, gids = status["Uid"].split(), status["Gid"].split()  # real, effective, saved, filesystem
            assert set(uids) == {str(IMAGE_UID)} and set(gids) == {str(IMAGE_UID)}, (name, pid, status["Name"])


def test_the_stage_jvms_map_the_class_archive_and_the_connector_built_into_the_image(deployment: Deployment) -> None:
    jvms = {pid: argv for pid, argv in _command_lines(deployment.worker.processes()).items()
            if argv[0].endswith("/bin/java")}
    assert len(jvms) == SPARK_STAGES, jvms
    for pid, argv in jvms.items():
        archive = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("-XX:SharedArchiveFile="))
        assert archive.startswith(IMAGE_CACHE + "/spark-classes/") and archive.endswith(".jsa"), archive
        assert archive in Path(f"/proc/{pid}/maps").read_text()  # mapped, not skipped as a misfit
        jars = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("spark.jars="))
        assert all(jar.startswith(IMAGE_CACHE + "/") for jar in jars.split(",")), jars  # no Maven at run time
    assert "class archive was not built" not in deployment.worker.logs(10_000)


def test_only_tmp_and_the_volumes_are_writable(deployment: Deployment) -> None:
    for name, container in deployment.containers().items():
        probe = container.exec("python", "-c", PROBE_WRITES, *READ_ONLY_PATHS, *WRITABLE_PATHS)
        assert probe.returncode == 0, (name, probe.stderr)
        report = json.loads(probe.stdout)
        assert (report["uid"], report["gid"]) == (IMAGE_UID, IMAGE_UID)
        assert report["writes"] == {**{path: errno.EROFS for path in READ_ONLY_PATHS},
                                    **{path: 0 for path in WRITABLE_PATHS}}, name
        assert container.running(), name  # all the while
