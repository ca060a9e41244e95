"""Pods of the Helm chart run as local processes: render a workload's container, map what names
the cluster to this machine, start the image's entrypoint with the rendered arguments.

Only what names the cluster is mapped: the broker and coordinator addresses, the HTTP host and
port, the mounted volumes (checkpoint storage shared by every pod, a state volume and ``/tmp`` per
pod), the API token Secret and the downward API (a StatefulSet pod's index); and the image's own
cache directory (``TIDEMARK_CACHE_DIR``) is this machine's. The image's entrypoint is
``tidemark``, so a pod is this environment's ``tidemark`` script with the rendered arguments;
killing its process tree is what losing the pod does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tidemark.local.quick_start import QUICK_START_ENV
from tidemark.local.pipeline import JobRun, LocalPipeline
from tidemark.maven import default_cache_dir
from tidemark.processes import die_with_parent, free_port_block

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "tidemark"
TOKEN = "chart-started-worker-token-7e21c9"
CHECKPOINTS_MOUNT = "/var/lib/tidemark/checkpoints"  # the chart's checkpoint storage volume
CLUSTER_NAMES = ("kafka:9092", "tidemark-coordinator", "/var/lib/tidemark", "0.0.0.0")
POD_INDEX = "metadata.labels['apps.kubernetes.io/pod-index']"
# the worker pods' Spark drivers run with the local pipeline's quick-start settings (C1 only, no
# whole-stage code generation, a batch a second: tidemark.local.quick_start), values a development
# cluster sets too (``worker.extraEnv``); without them each pod's JVMs spend their first minutes in
# C2 compilations, on a test machine that runs several pod trees at once
QUICK_START_EXTRA_ENV = [{"name": name, "value": value} for name, value in QUICK_START_ENV.items()]


@dataclass(frozen=True)
class RenderedContainer:
    """A workload's container as the chart renders it."""

    workload: str  # the Deployment's or StatefulSet's name
    command: list[str] | None
    args: list[str]
    env: dict[str, Any]  # a value, or a valueFrom document
    mounts: list[str]
    http_port: int
    ports: int  # how many container ports


def render_workers(values: dict[str, Any], revision: int = 1) -> dict[str, RenderedContainer]:
    """The worker Deployment and the worker-host StatefulSets, by name, as release ``revision``
    renders them (1: the install, later: an upgrade). The local pods share one
    checkpoint directory from any process, as pods on any node share a ReadWriteMany claim, so that
    is the claim rendered unless ``values`` names the checkpoint storage (the chart's default
    ReadWriteOnce claim refuses worker hosts, which spread over nodes)."""
    values = {"checkpointStorage": {"filesystem": {"accessModes": ["ReadWriteMany"]}}, **values}
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values, name="tidemark", namespace="tidemark", revision=revision,
                                is_install=revision == 1, is_upgrade=revision > 1)
    source = next(text for name, text in rendered.items() if name.endswith("templates/worker.yaml"))
    out = {}
    for doc in yaml.safe_load_all(source):
        if doc and doc["kind"] in ("Deployment", "StatefulSet"):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            out[doc["metadata"]["name"]] = RenderedContainer(
                doc["metadata"]["name"], container.get("command"), container["args"],
                {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]},
                [m["mountPath"] for m in container["volumeMounts"]],
                next(p["containerPort"] for p in container["ports"] if p["name"] == "http"), len(container["ports"]))
    return out


def render_worker(values: dict[str, Any]) -> RenderedContainer:
    return render_workers(values)["tidemark-worker"]


@dataclass(frozen=True)
class LocalPod:
    """Where the rendered container's cluster names point on this machine."""

    volumes: dict[str, Path]  # mount path -> local directory
    addresses: dict[str, str]  # exact env value -> local value
    secrets: dict[tuple[str, str], str]  # (Secret, key) -> value
    fields: dict[str, str]  # downward API field path -> value

    def env(self, container: RenderedContainer) -> dict[str, str]:
        """``os.environ`` without Tidemark or Kafka settings, plus the one the image sets that the
        chart does not: ``TIDEMARK_CACHE_DIR``, the cache the image is built with (Spark's Kafka
        connector and the JVM class archive; here this machine's cache, which the local pipeline
        fills the same way), plus the container's environment mapped."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TIDEMARK_") and k not in ("KAFKA_BOOTSTRAP_SERVERS", "BOOTSTRAP_SERVERS")}
        env["TIDEMARK_CACHE_DIR"] = str(default_cache_dir())
        for name, value in container.env.items():
            if isinstance(value, dict) and "secretKeyRef" in value:
                ref = value["secretKeyRef"]
                env[name] = self.secrets[(ref["name"], ref["key"])]
            elif isinstance(value, dict):
                env[name] = self.fields[value["fieldRef"]["fieldPath"]]
            elif value in self.addresses:
                env[name] = self.addresses[value]
            else:
                env[name] = self._local_path(value)
        leftover = {k: v for k, v in env.items() if k in container.env and any(n in v for n in CLUSTER_NAMES)}
        assert not leftover, f"unmapped cluster names: {leftover}"
        return env

    def _local_path(self, value: str) -> str:
        for mount in sorted(self.volumes, key=len, reverse=True):
            for prefix, local in ((mount, str(self.volumes[mount])),
                                  (f"file://{mount}", self.volumes[mount].as_uri())):
                if value == prefix or value.startswith(prefix + "/"):
                    return local + value[len(prefix):]
        return value


def local_pod(pipe: LocalPipeline, container: RenderedContainer, root: Path, pod_index: int = 0) -> LocalPod:
    volumes = {CHECKPOINTS_MOUNT: (pipe.home / "checkpoints").resolve(),  # the services' storage
               "/var/lib/tidemark/state": root / "state", "/tmp": root / "tmp"}
    assert sorted(container.mounts) == sorted(volumes), container.mounts
    for directory in volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    port = free_port_block(container.ports)  # the pod's own http port and the ports after it
    return LocalPod(volumes, {"kafka:9092": pipe.bootstrap, "0.0.0.0": "127.0.0.1", str(container.http_port): str(port),
                              "http://tidemark-coordinator:9400": pipe.coordinator_url},
                    {("tidemark-api-token", "api-token"): TOKEN}, {POD_INDEX: str(pod_index)})


def start_container(pipe: LocalPipeline, container: RenderedContainer, pod: LocalPod, name: str = "") -> JobRun:
    """The image's entrypoint (``tidemark``) with the rendered arguments; stopped with the pipeline."""
    assert container.command is None, "the chart relies on the image's entrypoint"
    entrypoint = str(Path(sys.executable).with_name("tidemark"))
    logs = pipe.home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"chart-{name or 'worker'}-{len(pipe.jobs)}.log"
    with open(log_path, "ab") as out:
        process = subprocess.Popen([entrypoint, *container.args], stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=pod.env(container), preexec_fn=die_with_parent)
    run = JobRun(process, log_path)
    pipe.jobs.append(run)
    return run
