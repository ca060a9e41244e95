"""The Helm chart renders a worker whose restart resumes the last state.

The chart is rendered (helm-python-sdk, as ``tests/deploy``), and the worker container's
arguments and environment are run here as they are, with only what names the cluster mapped to
local equivalents: the broker and coordinator addresses, the HTTP host and port, the mounted
volumes (checkpoint storage, the state volume, ``/tmp``) and the API token Secret. The image's
entrypoint is ``tidemark``, so the process is this environment's ``tidemark`` script with the
rendered arguments. It runs twice, as a pod does when it is lost: first start, SIGKILL of the
whole process tree mid-run, second start with the same arguments and environment; the
read_committed output must then be exact, record by record.

* ``job.upgradeMode=last-state`` (the default): the second start resumes the newest checkpoint;
* ``job.upgradeMode=stateless``: the first start is empty (``--fresh --start-id <id>``) and
  records its start id; the second, with the same start id, resumes instead of being refused;
  a new deployment (another image, so another start id) starts empty and is refused (exit 3)
  because the output already holds committed results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from pipeline_support import TOP_URLS, Milestone, Topics, pipeline, topics_for, verify_two_stage
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, wait_for
from tidemark.processes import die_with_parent, free_port_block

pytestmark = pytest.mark.timeout(900)

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "tidemark"
TOKEN = "chart-started-worker-token-7e21c9"
CHECKPOINTS_MOUNT = "/var/lib/tidemark/checkpoints"  # the chart's checkpoint storage volume
CLUSTER_NAMES = ("kafka:9092", "tidemark-coordinator", "/var/lib/tidemark", "0.0.0.0")


@dataclass(frozen=True)
class RenderedWorker:
    """The worker container as the chart renders it."""

    command: list[str] | None
    args: list[str]
    env: dict[str, Any]  # a value, or a valueFrom document
    mounts: list[str]
    http_port: int


def render_worker(values: dict[str, Any]) -> RenderedWorker:
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name="tidemark", namespace="tidemark", is_install=True)
    source = next(text for name, text in rendered.items() if name.endswith("templates/worker.yaml"))
    deployment = next(doc for doc in yaml.safe_load_all(source) if doc and doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return RenderedWorker(container.get("command"), container["args"],
                          {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]},
                          [m["mountPath"] for m in container["volumeMounts"]],
                          next(p["containerPort"] for p in container["ports"] if p["name"] == "http"))


def chart_values(pipe: LocalPipeline, topics: Topics, **job: str) -> dict[str, Any]:
    """The job and the deployment's topic prefix; one broker, so replication factor 1."""
    return {"topicPrefix": pipe.cluster.topic_prefix, "kafka": {"replicationFactor": 1},
            "worker": {"job": TOP_URLS, "jobArgs": topics.args(), "stages": 2}, "job": job}


@dataclass(frozen=True)
class LocalPod:
    """Where the rendered container's cluster names point on this machine."""

    volumes: dict[str, Path]  # mount path -> local directory
    addresses: dict[str, str]  # exact env value -> local value
    secrets: dict[tuple[str, str], str]  # (Secret, key) -> value

    def env(self, worker: RenderedWorker) -> dict[str, str]:
        """``os.environ`` without Tidemark or Kafka settings (the image sets none of its own
        that the chart does not), plus the container's environment mapped."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TIDEMARK_") and k not in ("KAFKA_BOOTSTRAP_SERVERS", "BOOTSTRAP_SERVERS")}
        for name, value in worker.env.items():
            if isinstance(value, dict):
                ref = value["secretKeyRef"]
                env[name] = self.secrets[(ref["name"], ref["key"])]
            elif value in self.addresses:
                env[name] = self.addresses[value]
            else:
                env[name] = self._local_path(value)
        leftover = {k: v for k, v in env.items() if k in worker.env and any(n in v for n in CLUSTER_NAMES)}
        assert not leftover, f"unmapped cluster names: {leftover}"
        return env

    def _local_path(self, value: str) -> str:
        for mount in sorted(self.volumes, key=len, reverse=True):
            for prefix, local in ((mount, str(self.volumes[mount])),
                                  (f"file://{mount}", self.volumes[mount].as_uri())):
                if value == prefix or value.startswith(prefix + "/"):
                    return local + value[len(prefix):]
        return value


def local_pod(pipe: LocalPipeline, worker: RenderedWorker, root: Path) -> LocalPod:
    volumes = {CHECKPOINTS_MOUNT: (pipe.home / "checkpoints").resolve(),  # the services' storage
               "/var/lib/tidemark/state": root / "state", "/tmp": root / "tmp"}
    assert sorted(worker.mounts) == sorted(volumes), worker.mounts
    for directory in volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    port = free_port_block(1 + 2)  # the supervisor and two stages
    return LocalPod(volumes, {"kafka:9092": pipe.bootstrap, "0.0.0.0": "127.0.0.1", str(worker.http_port): str(port),
                              "http://tidemark-coordinator:9400": pipe.coordinator_url},
                    {("tidemark-api-token", "api-token"): TOKEN})


def start_container(pipe: LocalPipeline, worker: RenderedWorker, pod: LocalPod) -> JobRun:
    """The image's entrypoint (``tidemark``) with the rendered arguments; stopped with the pipeline."""
    assert worker.command is None, "the chart relies on the image's entrypoint"
    entrypoint = str(Path(sys.executable).with_name("tidemark"))
    logs = pipe.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"chart-worker-{len(pipe.jobs)}.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen([entrypoint, *worker.args], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=pod.env(worker), preexec_fn=die_with_parent)
    run = JobRun(process, log_path)
    pipe.jobs.append(run)
    return run


def kill_and_start_again(pipe: LocalPipeline, topics: Topics, worker: RenderedWorker, pod: LocalPod,
                         kafka_bootstrap: str) -> tuple[JobRun, JobRun, Any, list[bytes], int]:
    """First start, SIGKILL of the tree after 3 checkpoints, second start with the same
    arguments and environment, 2 more checkpoints; the verdict on the output."""
    first = start_container(pipe, worker, pod)
    milestone = Milestone()
    feeder = InputFeeder(kafka_bootstrap, topics.input, total=2000, chunk=100, pause_s=0.5, until=milestone).start()
    wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 3, 300, "3 completed checkpoints")
    killed = first.kill_tree()
    assert len(killed) >= 3  # the supervisor and both stage workers (and their JVMs)
    sent_at_kill = len(feeder.records)
    again = start_container(pipe, worker, pod)  # what the restarted pod runs
    milestone.after_two_more_checkpoints(pipe, topics.job_id)
    records = feeder.join(timeout_s=600)
    verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
    return first, again, verdict, records, sent_at_kill


def test_chart_last_state_worker_resumes_after_a_sigkill_of_the_tree(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        worker = render_worker(chart_values(pipe, topics))
        assert worker.args == ["jobs", "run", TOP_URLS, "--job-args", json.dumps(topics.args(), separators=(",", ":"),
                               sort_keys=True), "--max-restarts", "10"]  # no --fresh, no --from-*
        pod = local_pod(pipe, worker, tmp_path / "pod")
        first, again, verdict, records, sent_at_kill = kill_and_start_again(pipe, topics, worker, pod, kafka_bootstrap)
        started = first.events("starting attempt")
        resumed = again.events("resuming the job's last state")
        restarted = again.events("starting attempt")
        again.stop()
    assert started[0]["restore"] is None  # nothing retained yet: the first start is empty
    assert resumed and restarted[0]["restore"] is not None and "/chk-" in restarted[0]["restore"], restarted[:1]
    assert len(records) > sent_at_kill  # input kept arriving across the kill
    assert verdict.exactly_once, verdict
    assert verdict.records == len(records)


def test_chart_stateless_worker_resumes_on_restart_and_a_new_deployment_starts_empty(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        worker = render_worker(chart_values(pipe, topics, upgradeMode="stateless"))
        assert worker.args[:-3] == ["jobs", "run", TOP_URLS, "--job-args",
                                    json.dumps(topics.args(), separators=(",", ":"), sort_keys=True),
                                    "--max-restarts", "10"]
        assert worker.args[-3:-1] == ["--fresh", "--start-id"]
        start_id = worker.args[-1]
        pod = local_pod(pipe, worker, tmp_path / "pod")
        first, again, verdict, records, _ = kill_and_start_again(pipe, topics, worker, pod, kafka_bootstrap)
        recorded = first.events("fresh start recorded")
        started = first.events("starting attempt")
        resumed = again.events("restart of a fresh start; resuming the job's last state")
        restarted = again.events("starting attempt")
        stopped = again.stop()
        record = json.loads((pipe.home / "checkpoints" / topics.job_id / "fresh-start.json").read_text())

        upgraded = render_worker({**chart_values(pipe, topics, upgradeMode="stateless"), "image": {"tag": "0.2.0"}})
        assert upgraded.args[:-1] == worker.args[:-1] and upgraded.args[-1] != start_id
        new_deployment = start_container(pipe, upgraded, local_pod(pipe, upgraded, tmp_path / "pod-2"))
        refused = new_deployment.wait(timeout_s=120)
        refused_log = new_deployment.log_path.read_text()
    assert recorded and recorded[0]["start_id"] == start_id and started[0]["restore"] is None
    assert record["start_id"] == start_id and record["baseline"] == recorded[0]["baseline"]
    assert resumed and resumed[0]["start_id"] == start_id and resumed[0]["checkpoint"] > record["baseline"]
    assert stopped == 143 and restarted[0]["restore"] is not None, restarted[:1]  # it ran until stopped
    assert verdict.exactly_once, verdict
    assert verdict.records == len(records)
    assert refused == 3, refused_log[-2000:]
    line = next(li for li in refused_log.splitlines() if li.startswith("tidemark jobs run:"))
    assert "--fresh would write results again" in line and topics.output in line
