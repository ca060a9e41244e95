"""The Helm chart lints, renders for every values variant, and renders valid, hardened manifests."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions

from deploy_support import (
    CHART_DIR,
    DASHBOARDS_DIR,
    REPO,
    SERVICE_NAMES,
    VERSION,
    Manifest,
    assert_runs_service_image,
    ci_values_files,
    NAMESPACE,
    RELEASE,
    load_yaml,
    render_chart,
    render_notes,
    validate_manifest,
)

VARIANTS = [pytest.param({}, id="defaults")] + [
    pytest.param(load_yaml(path), id=path.name) for path in ci_values_files()
]
COMPONENTS = list(SERVICE_NAMES)
RWX = "ReadWriteMany"
CLAIM_LABEL = "tidemark.io/checkpoint-claim"
# the processes that open checkpoint storage (tidemark.storage.open_storage); the changelog does not
CHECKPOINT_USERS = {"coordinator", "checkpoint-store", "materializer", "worker"}


def _deployments(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {
        m.doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: m.doc
        for m in manifests
        if m.doc["kind"] == "Deployment"
    }


def _env(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_there_are_ci_variants() -> None:
    assert len(ci_values_files()) >= 3


@pytest.mark.parametrize("values", VARIANTS)
def test_chart_lints_strictly(values: dict[str, Any]) -> None:
    report = helm.lint(CHART_DIR, values, strict=True, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == [], report


@pytest.mark.parametrize("values", VARIANTS)
def test_every_rendered_manifest_validates_strictly(values: dict[str, Any]) -> None:
    manifests = render_chart(values)
    assert len(manifests) >= 10
    for manifest in manifests:
        try:
            validate_manifest(manifest.doc)
        except Exception as error:  # noqa: BLE001 - name the failing document
            pytest.fail(f"{manifest.source} {manifest.key}: {error}")


@pytest.mark.parametrize("values", VARIANTS)
def test_workloads_are_probed_hardened_and_budgeted(values: dict[str, Any]) -> None:
    manifests = render_chart(values)
    deployments = _deployments(manifests)
    expected = [c for c in COMPONENTS if c != "worker" or values.get("worker", {}).get("enabled", True)]
    assert sorted(deployments) == sorted(expected)
    pdbs = {m.doc["metadata"]["name"] for m in manifests if m.doc["kind"] == "PodDisruptionBudget"}
    services = {m.doc["metadata"]["name"] for m in manifests if m.doc["kind"] == "Service"}
    for component, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["resources"]["requests"]["memory"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/var/lib/tidemark/state"} <= mounts
        assert f"tidemark-{component}" in services
        # a budget over a singleton protects nothing (maxUnavailable 1) or blocks every drain
        assert deployment["spec"]["replicas"] <= 1 and f"tidemark-{component}" not in pdbs


def _values_key(component: str) -> str:
    return {"checkpoint-store": "checkpointStore"}.get(component, component)


def test_default_commands_ports_and_settings() -> None:
    deployments = _deployments(render_chart())
    for port, component in enumerate(COMPONENTS, start=9400):
        container = deployments[component]["spec"]["template"]["spec"]["containers"][0]
        assert container["ports"][0]["containerPort"] == port
        env = _env(deployments[component])
        assert env["TIDEMARK_HTTP_PORT"] == str(port)
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert env["TIDEMARK_HTTP_HOST"] == "0.0.0.0"  # probes and Prometheus reach the pod IP
        assert env["TIDEMARK_KAFKA__REPLICATION_FACTOR"] == "1"  # a one-broker Kafka works
        assert env["TIDEMARK_CHECKPOINT_STORAGE_URL"] == "file:///var/lib/tidemark/checkpoints"
        assert_runs_service_image(container, component)
        assert container["image"] == f"ghcr.io/tidemark/tidemark-{component}:{VERSION}"
        if component == "worker":
            assert container["args"][:3] == ["jobs", "run", "tidemark.examples.access_log:top_urls"]
    coordinator = _env(deployments["coordinator"])
    assert coordinator["TIDEMARK_CHECKPOINT__TIMEOUT_MS"] == "600000"
    assert coordinator["TIDEMARK_CHECKPOINT__MODE"] == "EXACTLY_ONCE"
    assert coordinator["TIDEMARK_API_TOKEN"] == {"secretKeyRef": {"name": "tidemark-api-token", "key": "api-token"}}
    assert coordinator["TIDEMARK_JOBS__LAUNCHER"] == "none"  # jobs run as the worker workload
    assert _env(deployments["checkpoint-store"])["TIDEMARK_RETAINED_CHECKPOINTS"] == "3"
    assert _env(deployments["materializer"])["TIDEMARK_MATERIALIZATION__INTERVAL_MS"] == "180000"


def _containers(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: deployment["spec"]["template"]["spec"]["containers"][0]
            for name, deployment in _deployments(render_chart(values)).items()}


@pytest.mark.parametrize("values", VARIANTS)
def test_every_variant_runs_each_components_own_image_unless_told_otherwise(values: dict[str, Any]) -> None:
    containers = _containers(values)
    assert set(containers) <= set(COMPONENTS) and "coordinator" in containers
    for component, container in containers.items():
        if values.get("image", {}).get("perComponent", True):
            assert_runs_service_image(container, component)
        else:
            assert container["image"].split("@")[0].rsplit(":", 1)[0] == "ghcr.io/tidemark/tidemark"
            assert component == "worker" or container["args"] == ["run", component]


def test_one_base_image_for_every_component_on_request() -> None:
    """image.perComponent=false: the base image (the top-level Dockerfile) with `run <component>`."""
    containers = _containers({"image": {"perComponent": False, "tag": "0.2.0"}})
    for component, container in containers.items():
        assert container["image"] == "ghcr.io/tidemark/tidemark:0.2.0"
        if component == "worker":
            assert container["args"][:3] == ["jobs", "run", "tidemark.examples.access_log:top_urls"]
        else:
            assert container["args"] == ["run", component]


def test_image_values_name_each_components_image() -> None:
    digest = "sha256:" + "2" * 64
    containers = _containers({"image": {"registry": "registry.example.com", "repository": "acme/tidemark",
                                        "tag": "1.4.0", "components": {"checkpoint-store": {"digest": digest}}}})
    for component, container in containers.items():
        assert_runs_service_image(container, component, repository="registry.example.com/acme/tidemark")
    assert containers["checkpoint-store"]["image"] == f"registry.example.com/acme/tidemark-checkpoint-store@{digest}"
    assert containers["coordinator"]["image"] == "registry.example.com/acme/tidemark-coordinator:1.4.0"
    no_registry = _containers({"image": {"registry": ""}})
    assert no_registry["worker"]["image"] == f"tidemark/tidemark-worker:{VERSION}"


def test_a_jobs_own_worker_image() -> None:
    """An image FROM tidemark-worker that adds the job's module, in its own repository."""
    for per_component in (True, False):
        containers = _containers({"image": {"perComponent": per_component, "components": {"worker": {
            "registry": "registry.example.com", "repository": "acme/orders-jobs", "tag": "1.4.0"}}},
            "worker": {"job": "acme_jobs.orders:job"}})
        assert containers["worker"]["image"] == "registry.example.com/acme/orders-jobs:1.4.0"
        assert containers["worker"]["args"][:3] == ["jobs", "run", "acme_jobs.orders:job"]
        suffix = "-coordinator" if per_component else ""
        assert containers["coordinator"]["image"] == f"ghcr.io/tidemark/tidemark{suffix}:{VERSION}"


def test_worker_runs_the_job_supervisor_against_the_coordinator() -> None:
    manifests = render_chart()
    worker = _deployments(manifests)["worker"]
    container = worker["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[:3] == ["jobs", "run", "tidemark.examples.access_log:top_urls"]
    assert json.loads(args[args.index("--job-args") + 1]) == {}  # the example's defaults
    assert args[args.index("--max-restarts") + 1] == "10" and "--parallelism" not in args
    env = _env(worker)
    assert env["TIDEMARK_COORDINATOR_URL"] == "http://tidemark-coordinator:9400"
    assert env["TIDEMARK_API_TOKEN"] == {"secretKeyRef": {"name": "tidemark-api-token", "key": "api-token"}}
    # probes on the supervisor; the stages' metrics ports on the container and the Service
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("http", 9404), ("stage-0", 9405), ("stage-1", 9406)]
    service = next(m.doc for m in manifests if m.key == ("Service", "tidemark-worker"))
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 9404, "http"), ("stage-0", 9405, "stage-0"), ("stage-1", 9406, "stage-1")]


def test_worker_job_values() -> None:
    values = {"worker": {"job": "my_jobs.orders:pipeline", "jobArgs": {"job_id": "orders", "window_s": 60},
                         "stages": 3, "parallelism": 4, "maxRestarts": 2, "httpPort": 9500},
              "auth": {"existingSecret": "my-token", "existingSecretKey": "token"}}
    worker = _deployments(render_chart(values))["worker"]
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["jobs", "run", "my_jobs.orders:pipeline", "--job-args",
                                 '{"job_id":"orders","window_s":60}', "--max-restarts", "2", "--parallelism", "4"]
    assert [p["containerPort"] for p in container["ports"]] == [9500, 9501, 9502, 9503]
    assert _env(worker)["TIDEMARK_API_TOKEN"] == {"secretKeyRef": {"name": "my-token", "key": "token"}}


def test_worker_standby_is_on_by_default_and_can_be_turned_off() -> None:
    assert "--no-standby" not in _worker_args({})
    assert _worker_args({"worker": {"standby": False}})[-1] == "--no-standby"


def _worker_args(values: dict[str, Any]) -> list[str]:
    return _deployments(render_chart(values))["worker"]["spec"]["template"]["spec"]["containers"][0]["args"]


BASE_ARGS = ["jobs", "run", "tidemark.examples.access_log:top_urls", "--job-args", "{}", "--max-restarts", "10"]
# the first 16 hex digits of the SHA-256 of the default job definition (recomputed below)
DEFAULT_START_ID = "02e7ae18d95116ca"
SAVEPOINT = "access-log-top-urls/savepoints/sp-12/_metadata"


@pytest.mark.parametrize("job, start", [
    ({}, []),  # last-state: a (re)started pod resumes the newest retained checkpoint or savepoint
    ({"upgradeMode": "last-state", "initialSavepointPath": SAVEPOINT}, ["--from-savepoint", SAVEPOINT]),
    ({"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT, "id": "access-log-top-urls"},
     ["--from-savepoint", SAVEPOINT, "--generation", "1"]),
    ({"upgradeMode": "stateless"}, ["--fresh", "--start-id", DEFAULT_START_ID]),
    ({"upgradeMode": "stateless", "startId": "rev-7"}, ["--fresh", "--start-id", "rev-7"]),
    ({"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT, "allowNonRestoredState": True,
      "id": "access-log-top-urls"},
     ["--from-savepoint", SAVEPOINT, "--allow-non-restored-state", "--generation", "1"]),
], ids=["last-state", "last-state-initial-savepoint", "savepoint", "stateless", "stateless-start-id",
        "savepoint-allow-non-restored-state"])
def test_job_upgrade_modes_render_the_start_arguments(job: dict[str, Any], start: list[str]) -> None:
    """The rendered arguments are the same for the first start and every restart of the pod;
    ``tidemark jobs run`` makes a restart resume the job's newest state in each mode (an initial
    savepoint is used only while the job has no newer state; --fresh with a start id it already
    started resumes what that start retained). tests/e2e/test_production_continuity.py runs
    these arguments: no --from-* (the SIGKILL of the whole tree) and --from-savepoint (the
    upgrade in savepoint mode); tests/e2e/test_chart_started_worker.py runs the rendered
    last-state and stateless containers twice. In savepoint mode the job runs as the release's
    revision (``--generation``: the pre-upgrade hook suspends it for the upgrade's)."""
    assert _worker_args({"job": job}) == BASE_ARGS + start
    assert "--force" not in _worker_args({"job": job})


def _start_id(values: dict[str, Any]) -> str:
    args = _worker_args({**values, "job": {"upgradeMode": "stateless"}})
    return args[args.index("--start-id") + 1]


def test_stateless_start_id_changes_with_the_job_definition_only() -> None:
    """A new deployment of the job (its reference, arguments, parallelism or image changed) gets
    a new start id and so starts empty; any other change keeps it, so the pod resumes."""
    image = _deployments(render_chart())["worker"]["spec"]["template"]["spec"]["containers"][0]["image"]
    definition = {"image": image, "job": "tidemark.examples.access_log:top_urls", "jobArgs": {}, "parallelism": 0}
    digest = hashlib.sha256(json.dumps(definition, separators=(",", ":"), sort_keys=True).encode()).hexdigest()
    assert _start_id({}) == DEFAULT_START_ID == digest[:16]
    new_deployments = [
        {"worker": {"job": "my_jobs.orders:pipeline"}},
        {"worker": {"jobArgs": {"output_topic": "top-urls-v2"}}},
        {"worker": {"parallelism": 4}},
        {"image": {"tag": "0.2.0"}},
        {"image": {"components": {"worker": {"digest": "sha256:" + "1" * 64}}}},
        {"image": {"perComponent": False}},
    ]
    ids = [_start_id(values) for values in new_deployments]
    assert DEFAULT_START_ID not in ids and len(set(ids)) == len(ids)
    same_deployment = [
        {"worker": {"maxRestarts": 3}},
        {"worker": {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}},
        {"checkpoint": {"intervalMs": 5000}},
        {"coordinator": {"httpPort": 9500}},
        {"image": {"components": {"coordinator": {"digest": "sha256:" + "1" * 64}}}},
    ]
    assert [_start_id(values) for values in same_deployment] == [DEFAULT_START_ID] * len(same_deployment)
    assert _start_id({"worker": {"jobArgs": {"a": 1, "b": 2}}}) == _start_id({"worker": {"jobArgs": {"b": 2, "a": 1}}})


def _hook_jobs(values: dict[str, Any], revision: int = 1) -> list[dict[str, Any]]:
    return [m.doc for m in render_chart(values, revision=revision) if m.doc["kind"] == "Job"]


HOOK_ARGS = ["savepoint", "trigger", "access-log-top-urls", "--stop", "--wait", "--if-running", "--timeout", "600",
             "--generation", "4"]


@pytest.mark.parametrize("job", [
    {"state": "suspended", "id": "access-log-top-urls"},
    {"upgradeMode": "savepoint", "id": "access-log-top-urls"},
    {"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT, "id": "access-log-top-urls"},
], ids=["suspended", "savepoint", "savepoint-initial-path"])
def test_suspend_and_savepoint_upgrades_stop_the_job_with_a_savepoint_in_a_pre_upgrade_hook(
        job: dict[str, Any]) -> None:
    """The hook's command is the one tests/e2e/test_chart_lifecycle.py runs against a job: it
    suspends the job for the upgrade's revision, which the upgraded worker pod passes too."""
    (hook,) = _hook_jobs({"job": job}, revision=4)
    validate_manifest(hook)
    assert hook["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    assert hook["metadata"]["annotations"]["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod = hook["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == HOOK_ARGS and pod["restartPolicy"] == "Never"
    assert container["image"] == "ghcr.io/tidemark/tidemark-worker:0.1.0"  # it has the CLI and the job
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["TIDEMARK_COORDINATOR_URL"] == "http://tidemark-coordinator:9400"
    assert env["TIDEMARK_API_TOKEN"] == {"secretKeyRef": {"name": "tidemark-api-token", "key": "api-token"}}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    worker = _deployments(render_chart({"job": job}, revision=4))["worker"]["spec"]
    assert worker["replicas"] == (0 if job.get("state") == "suspended" else 1)
    args = worker["template"]["spec"]["containers"][0]["args"]
    if "initialSavepointPath" in job:
        assert args == BASE_ARGS + ["--from-savepoint", SAVEPOINT, "--generation", "4"]
    else:  # the upgraded pod resumes the job's newest state: the hook's savepoint
        assert args == BASE_ARGS + ["--generation", "4"]
    assert _worker_args({}) == BASE_ARGS  # last state, running: no hook, no generation


def test_a_running_last_state_job_has_no_hook_and_the_id_may_come_from_the_job_args() -> None:
    assert _hook_jobs({}) == [] and _hook_jobs({"job": {"upgradeMode": "stateless"}}) == []
    (hook,) = _hook_jobs({"job": {"state": "suspended"}, "worker": {"jobArgs": {"job_id": "orders"}}})
    assert hook["spec"]["template"]["spec"]["containers"][0]["args"][2] == "orders"


def test_a_suspended_job_has_no_worker_host_pods() -> None:
    values = {"job": {"state": "suspended", "id": "j"}, "worker": {"workers": 2, "hosts": {"enabled": True}},
              "checkpointStorage": {"filesystem": {"accessModes": [RWX]}}}
    manifests = render_chart(values)
    hosts = [m.doc for m in manifests if m.doc["kind"] == "StatefulSet"]
    assert hosts and all(h["spec"]["replicas"] == 0 for h in hosts)
    assert not [m for m in manifests if m.doc["kind"] == "PodDisruptionBudget"]
    assert "--workers" in _deployments(manifests)["worker"]["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize("job, message", [
    ({"upgradeMode": "savepoint"}, "job.id is required with job.state=suspended or job.upgradeMode=savepoint"),
    ({"state": "suspended"}, "job.id is required with job.state=suspended or job.upgradeMode=savepoint"),
    ({"upgradeMode": "stateless", "initialSavepointPath": SAVEPOINT}, "cannot be used with job.upgradeMode=stateless"),
    ({"startId": "rev-7"}, "job.startId only applies with job.upgradeMode=stateless"),
    ({"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT, "startId": "rev-7"},
     "job.startId only applies with job.upgradeMode=stateless"),
])
def test_inconsistent_upgrade_mode_fails_rendering(job: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render_chart({"job": job})


def test_single_stage_job_variant() -> None:
    manifests = render_chart(load_yaml(CHART_DIR / "ci" / "s3-sasl-values.yaml"))
    container = _deployments(manifests)["worker"]["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[2] == "tidemark.examples.access_log:url_counts"
    assert json.loads(args[args.index("--job-args") + 1])["changelog"] is True
    assert [p["name"] for p in container["ports"]] == ["http", "stage-0"]
    monitor = next(m.doc for m in manifests if m.doc["kind"] == "ServiceMonitor")
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http", "stage-0"]


@pytest.mark.parametrize("worker, ports", [({}, ["http", "stage-0", "stage-1"]),
                                          ({"stages": 1}, ["http", "stage-0"]),
                                          ({"workers": 2, "hosts": {"enabled": True}},
                                           ["http", "process-0"]),
                                          ({"enabled": False}, ["http"])])
def test_monitors_scrape_every_stage_of_the_worker(worker: dict[str, Any], ports: list[str]) -> None:
    values = {"worker": worker, "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
              "checkpointStorage": {"filesystem": {"accessModes": [RWX]}}}  # worker hosts need shared storage
    monitors = {m.doc["kind"]: m.doc["spec"] for m in render_chart(values) if m.doc["kind"].endswith("Monitor")}
    assert [e["port"] for e in monitors["ServiceMonitor"]["endpoints"]] == ports
    assert [e["port"] for e in monitors["PodMonitor"]["podMetricsEndpoints"]] == ports
    endpoints = monitors["ServiceMonitor"]["endpoints"] + monitors["PodMonitor"]["podMetricsEndpoints"]
    assert all(e["honorLabels"] is True and e["path"] == "/metrics" for e in endpoints)


def test_worker_hosts_run_w_pods_per_stage_each_knowing_its_stage_and_index() -> None:
    manifests = render_chart(load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml"))
    supervisor = _deployments(manifests)["worker"]["spec"]["template"]["spec"]["containers"][0]
    assert supervisor["args"][-3:] == ["--workers", "2", "--worker-hosts"]
    assert [p["name"] for p in supervisor["ports"]] == ["http"]  # no worker process runs there
    hosts = {m.doc["metadata"]["name"]: m.doc for m in manifests if m.doc["kind"] == "StatefulSet"}
    assert sorted(hosts) == ["tidemark-worker-s0", "tidemark-worker-s1"]
    services = {m.doc["metadata"]["name"]: m.doc for m in manifests if m.doc["kind"] == "Service"}
    pdbs = {m.doc["metadata"]["name"] for m in manifests if m.doc["kind"] == "PodDisruptionBudget"}
    for i, (name, host) in enumerate(sorted(hosts.items())):
        assert host["spec"]["replicas"] == 2 and host["spec"]["podManagementPolicy"] == "Parallel"
        assert host["spec"]["serviceName"] == name and services[name]["spec"]["clusterIP"] == "None"
        assert name in pdbs
        pod = host["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["args"] == ["jobs", "host", "tidemark.examples.access_log:top_urls", "--job-args", "{}",
                                     "--stage-index", str(i)]
        index = {e["name"]: e for e in container["env"]}["TIDEMARK_WORKER_INDEX"]
        assert index["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
        assert [p["name"] for p in container["ports"]] == ["http", "process-0"]  # one process: a fused worker
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        assert container["resources"]["requests"]["memory"] == "3Gi"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp", "/var/lib/tidemark/state",
                                                                         "/var/lib/tidemark/checkpoints"}


def test_the_workers_extra_env_reaches_the_supervisor_and_every_host_pod() -> None:
    values = load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml")
    extra = {"name": "TIDEMARK_SPARK__JAVA_OPTIONS", "value": "-XX:TieredStopAtLevel=1"}
    values["worker"]["extraEnv"] = [extra]
    manifests = render_chart(values)
    containers = [m.doc["spec"]["template"]["spec"]["containers"][0] for m in manifests
                  if m.doc["kind"] in ("Deployment", "StatefulSet")
                  and m.doc["metadata"]["name"].startswith("tidemark-worker")]
    assert len(containers) == 3  # the supervisor and the two stages' host pods
    assert all(extra in container["env"] for container in containers)


def test_the_stages_spark_runs_on_the_spark_master_of_the_values_in_every_worker_pod() -> None:
    values = load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml")
    values["spark"] = {"master": "spark://spark-master:7077",
                       "conf": {"spark.executor.cores": "2", "spark.cores.max": "2"}}
    manifests = render_chart(values)
    containers = [m.doc["spec"]["template"]["spec"]["containers"][0] for m in manifests
                  if m.doc["kind"] in ("Deployment", "StatefulSet")
                  and m.doc["metadata"]["name"].startswith("tidemark-worker")]
    assert len(containers) == 3  # the supervisor (whose standbys are stage workers too) and the host pods
    for container in containers:
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["TIDEMARK_SPARK__MASTER"] == "spark://spark-master:7077"
        assert json.loads(env["TIDEMARK_SPARK__CONF"]) == {"spark.executor.cores": "2", "spark.cores.max": "2"}
        assert env["TIDEMARK_SPARK__DRIVER_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_by_default_the_stages_spark_keeps_the_workers_local_mode() -> None:
    env = _env(_deployments(render_chart())["worker"])
    assert not {"TIDEMARK_SPARK__MASTER", "TIDEMARK_SPARK__CONF", "TIDEMARK_SPARK__DRIVER_HOST"} & env.keys()
    local = _env(_deployments(render_chart({"spark": {"master": "local[4]"}}))["worker"])
    assert local["TIDEMARK_SPARK__MASTER"] == "local[4]" and "TIDEMARK_SPARK__DRIVER_HOST" not in local


def test_large_integers_render_as_plain_digits() -> None:
    deployments = _deployments(render_chart({"checkpoint": {"timeoutMs": 86400000}}))
    assert _env(deployments["coordinator"])["TIDEMARK_CHECKPOINT__TIMEOUT_MS"] == "86400000"


def _pod(manifests: list[Manifest], kind: str, name: str) -> dict[str, Any]:
    return next(m.doc for m in manifests if m.key == (kind, name))["spec"]["template"]


def test_the_default_rendering_works_on_an_ordinary_cluster() -> None:
    """Issue #40's acceptance: the defaults render valid objects with no ReadWriteMany claim, no
    generated token and a step that creates the job's input topic; the pods sharing the
    ReadWriteOnce claim are scheduled together, since all of them read and write its files."""
    manifests = render_chart()
    for manifest in manifests:
        validate_manifest(manifest.doc)
    claims = [m.doc for m in manifests if m.doc["kind"] == "PersistentVolumeClaim"]
    assert [c["spec"]["accessModes"] for c in claims] == [["ReadWriteOnce"]]
    assert [m.key for m in manifests if m.doc["kind"] == "Secret"] == []
    assert "randAlphaNum" not in json.dumps([m.doc for m in manifests])
    init = _pod(manifests, "Deployment", "tidemark-worker")["spec"]["initContainers"]
    assert [(c["name"], c["args"]) for c in init] == [
        ("create-topic-0", ["topics", "create", "access-log", "--partitions", "4", "--if-not-exists"])]
    env = {e["name"]: e.get("value") for e in init[0]["env"]}
    assert env["TIDEMARK_KAFKA__REPLICATION_FACTOR"] == "1" and env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert init[0]["image"] == f"ghcr.io/tidemark/tidemark-worker:{VERSION}" and "command" not in init[0]
    assert init[0]["securityContext"]["readOnlyRootFilesystem"] is True
    claim = claims[0]["metadata"]["name"]
    for component in COMPONENTS:
        pod = _pod(manifests, "Deployment", f"tidemark-{component}")
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        if component not in CHECKPOINT_USERS:
            assert "checkpoints" not in volumes and "affinity" not in pod["spec"] and CLAIM_LABEL not in pod["metadata"]["labels"]
            continue
        assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == claim
        assert pod["metadata"]["labels"][CLAIM_LABEL] == claim
        assert pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
            {"labelSelector": {"matchLabels": {CLAIM_LABEL: claim}}, "topologyKey": "kubernetes.io/hostname"}]


def test_a_readwritemany_claim_or_s3_lets_the_pods_spread() -> None:
    for storage in ({"filesystem": {"accessModes": [RWX], "storageClass": "nfs"}},
                    {"type": "s3", "s3": {"bucket": "checkpoints"}}):
        manifests = render_chart({"checkpointStorage": storage})
        for manifest in manifests:
            validate_manifest(manifest.doc)
            if manifest.doc["kind"] == "Deployment":
                pod = manifest.doc["spec"]["template"]
                assert "affinity" not in pod["spec"] and CLAIM_LABEL not in pod["metadata"]["labels"]
        claims = [m.doc["spec"] for m in manifests if m.doc["kind"] == "PersistentVolumeClaim"]
        assert claims == ([] if storage.get("type") == "s3" else
                          [{"accessModes": [RWX], "storageClassName": "nfs", "resources": {"requests": {"storage": "10Gi"}}}])


def test_colocation_keeps_a_components_own_affinity() -> None:
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["streaming"]}]}]}},
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "topology.kubernetes.io/zone"}]}}
    manifests = render_chart({"worker": {"affinity": own}})
    affinity = _pod(manifests, "Deployment", "tidemark-worker")["spec"]["affinity"]
    assert affinity["nodeAffinity"] == own["nodeAffinity"]
    terms = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms[0] == own["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert terms[1]["labelSelector"] == {"matchLabels": {CLAIM_LABEL: "tidemark-checkpoints"}} and len(terms) == 2
    coordinator = _pod(manifests, "Deployment", "tidemark-coordinator")["spec"]["affinity"]
    assert list(coordinator) == ["podAffinity"]  # the worker's own terms stay the worker's


def test_input_topics_come_from_values_and_creating_them_can_be_turned_off() -> None:
    topics = [{"name": "orders", "partitions": 12, "config": {"retention.ms": "604800000", "cleanup.policy": "delete"}},
              {"name": "refunds"}]
    values = {"kafka": {"replicationFactor": 3}, "worker": {"inputTopics": {"topics": topics}}}
    init = _pod(render_chart(values), "Deployment", "tidemark-worker")["spec"]["initContainers"]
    assert [c["args"] for c in init] == [
        ["topics", "create", "orders", "--partitions", "12", "--if-not-exists", "--config", "cleanup.policy=delete",
         "--config", "retention.ms=604800000"],
        ["topics", "create", "refunds", "--partitions", "1", "--if-not-exists"]]
    assert all({"name": "TIDEMARK_KAFKA__REPLICATION_FACTOR", "value": "3"} in c["env"] for c in init)
    off = _pod(render_chart({"worker": {"inputTopics": {"create": False}}}), "Deployment", "tidemark-worker")
    assert "initContainers" not in off["spec"]
    assert "input topics must exist" in render_notes({"worker": {"inputTopics": {"create": False}}})


def _run_rendered(container: dict[str, Any], kafka_bootstrap: str, state: Path) -> subprocess.CompletedProcess[str]:
    """The container's arguments to the image's entrypoint (`tidemark`), its environment with what
    names the cluster mapped to this machine: the broker and the state volume."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_", "KAFKA_"))}
    for variable in container["env"]:
        value = variable["value"]
        env[variable["name"]] = (kafka_bootstrap if variable["name"] == "KAFKA_BOOTSTRAP_SERVERS"
                                 else value.replace("/var/lib/tidemark/state", str(state)))
    entrypoint = Path(sys.executable).with_name("tidemark")
    return subprocess.run([str(entrypoint), *container["args"]], env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_rendered_topic_step_creates_the_topic_and_passes_once_it_exists(
        kafka_bootstrap: str, unique_name: Any, tmp_path: Path) -> None:
    """Run as rendered against the broker: the first start creates the topic with its partitions
    and settings; a restart after the topic grew (or with it as it was) leaves it as it is."""
    topic = unique_name("orders")
    values = {"worker": {"inputTopics": {"topics": [
        {"name": topic, "partitions": 3, "config": {"retention.ms": "3600000"}}]}}}
    container = _pod(render_chart(values), "Deployment", "tidemark-worker")["spec"]["initContainers"][0]
    first = _run_rendered(container, kafka_bootstrap, tmp_path)
    assert first.returncode == 0 and f"created topic {topic} (3 partitions)" in first.stdout, first.stderr
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    assert len(meta.partitions) == 3 and len(meta.partitions[0].replicas) == 1  # kafka.replicationFactor
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    assert admin.describe_configs([resource])[resource].result(timeout=10)["retention.ms"].value == "3600000"
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=10)
    again = _run_rendered(container, kafka_bootstrap, tmp_path)
    assert again.returncode == 0 and f"topic {topic} exists (5 partitions)" in again.stdout, again.stderr


def test_the_topic_containers_reach_kafka_as_the_worker_does() -> None:
    manifests = render_chart(load_yaml(CHART_DIR / "ci" / "s3-sasl-values.yaml"))
    pod = _pod(manifests, "Deployment", "tidemark-worker")["spec"]
    worker = pod["containers"][0]
    user_init, create = pod["initContainers"]  # values.initContainers run first
    assert user_init["name"] == "wait-for-schema-registry"
    assert create["args"][:3] == ["topics", "create", "nginx-access"] and create["image"] == worker["image"]
    worker_env = {e["name"]: e for e in worker["env"]}
    for variable in create["env"]:
        if variable["name"] != "TIDEMARK_API_TOKEN":
            assert worker_env[variable["name"]] == variable
    assert {"TIDEMARK_KAFKA__SASL_PASSWORD", "TIDEMARK_KAFKA__SSL_CA_LOCATION"} <= {e["name"] for e in create["env"]}
    assert "TIDEMARK_API_TOKEN" not in {e["name"] for e in create["env"]}
    assert create["envFrom"] == worker["envFrom"] == [{"secretRef": {"name": "orders-job-settings"}}]
    assert {m["name"] for m in create["volumeMounts"]} == {"tmp", "state", "kafka-ca", "job-config"}


def test_extra_volumes_env_from_init_containers_and_grace_period_for_every_component() -> None:
    keys = {"coordinator": "coordinator", "checkpoint-store": "checkpointStore", "changelog": "changelog",
            "materializer": "materializer", "worker": "worker"}
    values: dict[str, Any] = {"worker": {"inputTopics": {"create": False}}}
    for component, key in keys.items():
        values.setdefault(key, {}).update({
            "extraVolumes": [{"name": "extra", "secret": {"secretName": f"{component}-files"}}],
            "extraVolumeMounts": [{"name": "extra", "mountPath": "/etc/extra", "readOnly": True}],
            "extraEnvFrom": [{"configMapRef": {"name": f"{component}-env"}}],
            "initContainers": [{"name": "prepare", "image": "busybox:1.36", "args": ["true"]}],
            "terminationGracePeriodSeconds": 90})
    manifests = render_chart(values)
    for manifest in manifests:
        validate_manifest(manifest.doc)
    for component in COMPONENTS:
        spec = _pod(manifests, "Deployment", f"tidemark-{component}")["spec"]
        container = spec["containers"][0]
        assert spec["terminationGracePeriodSeconds"] == 90
        assert {"name": "extra", "secret": {"secretName": f"{component}-files"}} in spec["volumes"]
        assert container["volumeMounts"][-1] == {"name": "extra", "mountPath": "/etc/extra", "readOnly": True}
        assert container["envFrom"] == [{"configMapRef": {"name": f"{component}-env"}}]
        assert [c["name"] for c in spec["initContainers"]] == ["prepare"]
    defaults = _pod(render_chart(), "Deployment", "tidemark-coordinator")["spec"]
    assert defaults["terminationGracePeriodSeconds"] == 30 and "initContainers" not in defaults
    assert "envFrom" not in defaults["containers"][0]


def test_worker_hosts_get_the_workers_extras_but_not_its_topic_containers() -> None:
    values = load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml")
    values["worker"]["initContainers"] = [{"name": "prepare", "image": "busybox:1.36"}]
    manifests = render_chart(values)
    supervisor = _pod(manifests, "Deployment", "tidemark-worker")["spec"]
    assert [c["name"] for c in supervisor["initContainers"]] == ["prepare", "create-topic-0"]
    for i in range(2):
        host = _pod(manifests, "StatefulSet", f"tidemark-worker-s{i}")["spec"]
        assert [c["name"] for c in host["initContainers"]] == ["prepare"]


def test_a_disruption_budget_only_over_more_than_one_pod() -> None:
    values = load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml")
    pdbs = {m.doc["metadata"]["name"]: m.doc["spec"] for m in render_chart(values)
            if m.doc["kind"] == "PodDisruptionBudget"}
    assert sorted(pdbs) == ["tidemark-worker-s0", "tidemark-worker-s1"]  # 2 host pods each; no singleton
    assert pdbs["tidemark-worker-s0"]["maxUnavailable"] == 1
    values["worker"]["workers"] = 1
    assert not [m for m in render_chart(values) if m.doc["kind"] == "PodDisruptionBudget"]
    values["worker"].update(workers=2, pdb={"enabled": False, "maxUnavailable": 1})
    assert not [m for m in render_chart(values) if m.doc["kind"] == "PodDisruptionBudget"]


def test_network_policy_admits_the_release_and_the_metrics_scrapers() -> None:
    assert not [m for m in render_chart() if m.doc["kind"] == "NetworkPolicy"]
    manifests = render_chart({"networkPolicy": {"enabled": True}})
    policy = next(m.doc for m in manifests if m.doc["kind"] == "NetworkPolicy")
    validate_manifest(policy)
    release = {"app.kubernetes.io/name": "tidemark", "app.kubernetes.io/instance": "tidemark"}
    assert policy["spec"]["podSelector"] == {"matchLabels": release} and policy["spec"]["policyTypes"] == ["Ingress"]
    own, metrics = policy["spec"]["ingress"]
    assert own == {"from": [{"podSelector": {"matchLabels": release}}]}
    assert metrics["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "prometheus"}}}]
    assert [p["port"] for p in metrics["ports"]] == ["http", "stage-0", "stage-1"]
    # every named port the policy opens is a port of a pod it selects
    named = {p["name"] for m in manifests if m.doc["kind"] == "Deployment"
             for p in m.doc["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["port"] for p in metrics["ports"]} <= named
    hosts = load_yaml(CHART_DIR / "ci" / "worker-hosts-values.yaml") | {"networkPolicy": {
        "enabled": True, "metricsFrom": [], "extraIngress": [{"ports": [{"port": 9400, "protocol": "TCP"}]}]}}
    policy = next(m.doc for m in render_chart(hosts) if m.doc["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][1:] == [{"ports": [{"port": 9400, "protocol": "TCP"}]}]


# ---- the API token: an existing Secret by default; generated only where it can be kept ----

def test_by_default_the_token_is_read_from_a_secret_the_chart_does_not_render() -> None:
    manifests = render_chart()
    assert not [m for m in manifests if m.doc["kind"] == "Secret"]
    ref = {"secretKeyRef": {"name": "tidemark-api-token", "key": "api-token"}}
    deployments = _deployments(manifests)
    assert _env(deployments["coordinator"])["TIDEMARK_API_TOKEN"] == _env(deployments["worker"])["TIDEMARK_API_TOKEN"] == ref
    notes = render_notes()
    assert "kubectl -n tidemark create secret generic tidemark-api-token --from-literal=api-token=" in notes
    mine = _deployments(render_chart({"auth": {"existingSecret": "ops-token", "existingSecretKey": "token"}}))
    assert _env(mine["coordinator"])["TIDEMARK_API_TOKEN"] == {"secretKeyRef": {"name": "ops-token", "key": "token"}}


def test_a_given_token_is_stored_in_the_chart_secret() -> None:
    secrets = [m.doc for m in render_chart({"auth": {"apiToken": "s3cr3t"}}) if m.doc["kind"] == "Secret"]
    assert [(s["metadata"]["name"], base64.b64decode(s["data"]["api-token"]).decode()) for s in secrets] == [
        ("tidemark-api-token", "s3cr3t")]
    assert "create secret generic" not in render_notes({"auth": {"apiToken": "s3cr3t"}})


def test_an_offline_render_refuses_to_generate_a_token() -> None:
    """helm template, Argo CD: lookup sees nothing, so a generated token would change on every render."""
    with pytest.raises(helm.HelmError, match=r"auth.generate: the cluster cannot be read .* set "
                                             r"auth.existingSecret=tidemark-api-token instead"):
        render_chart({"auth": {"generate": True}})


class _FakeApiServer(BaseHTTPRequestHandler):
    """The few Kubernetes API answers a render's `lookup` asks for: the discovery of v1, a list of
    the namespace's Services, and the Secrets in ``secrets``."""

    secrets: dict[str, dict[str, Any]] = {}

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = self.path.split("?")[0]
        namespace = f"/api/v1/namespaces/{NAMESPACE}"
        if path == "/api/v1":
            self._answer(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": resource, "singularName": kind.lower(), "namespaced": True, "kind": kind, "verbs": ["get", "list"]}
                for resource, kind in (("secrets", "Secret"), ("services", "Service"))]})
        elif path == f"{namespace}/services":
            self._answer(200, {"kind": "ServiceList", "apiVersion": "v1", "metadata": {}, "items": []})
        elif path.startswith(f"{namespace}/secrets/") and path.rsplit("/", 1)[1] in self.secrets:
            self._answer(200, self.secrets[path.rsplit("/", 1)[1]])
        else:
            self._answer(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                               "code": 404})


@contextmanager
def _cluster(secrets: dict[str, dict[str, Any]]) -> Iterator[helm.Config]:
    handler = type("Handler", (_FakeApiServer,), {"secrets": secrets})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with helm.Config(namespace=NAMESPACE, kube_apiserver=f"http://127.0.0.1:{server.server_address[1]}",
                         kube_token="test") as config:
            yield config
    finally:
        server.shutdown()
        server.server_close()


def _rendered_token(config: helm.Config, values: dict[str, Any]) -> str:
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = config.render(chart, values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    secret = next(doc for doc in yaml.safe_load_all(rendered["tidemark/templates/secrets.yaml"]) if doc)
    assert secret["metadata"]["name"] == "tidemark-api-token"
    return base64.b64decode(secret["data"]["api-token"]).decode()


def test_a_render_against_the_cluster_generates_a_token_once_and_keeps_it() -> None:
    generate = {"auth": {"generate": True}}
    with _cluster({}) as config:  # helm install: no Secret yet
        first, second = _rendered_token(config, generate), _rendered_token(config, generate)
    assert len(first) == 40 and first.isalnum() and first != second
    kept = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tidemark-api-token", "namespace": NAMESPACE},
            "data": {"api-token": base64.b64encode(first.encode()).decode()}}
    with _cluster({"tidemark-api-token": kept}) as config:  # helm upgrade: the token stays
        assert _rendered_token(config, generate) == _rendered_token(config, generate) == first


def test_sasl_tls_and_object_store_come_from_values_and_secrets() -> None:
    values = load_yaml(CHART_DIR / "ci" / "s3-sasl-values.yaml")
    manifests = render_chart(values)
    env = _env(_deployments(manifests)["materializer"])
    assert env["TIDEMARK_KAFKA__SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["TIDEMARK_KAFKA__SASL_USERNAME"] == "tidemark"
    assert env["TIDEMARK_KAFKA__SASL_PASSWORD"] == {"secretKeyRef": {"name": "tidemark-kafka-credentials", "key": "password"}}
    assert env["TIDEMARK_KAFKA__SSL_CA_LOCATION"] == "/etc/tidemark/kafka-ca/ca.crt"
    assert env["TIDEMARK_CHECKPOINT_STORAGE_URL"] == "s3://tidemark-checkpoints/prod"
    assert env["TIDEMARK_S3__ENDPOINT_URL"] == "https://minio.storage:9000"
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "tidemark-s3", "key": "secret-access-key"}}
    kinds = {m.doc["kind"] for m in manifests}
    assert "PersistentVolumeClaim" not in kinds and "Secret" not in kinds
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds


def test_chart_created_sasl_secret_and_existing_claim() -> None:
    manifests = render_chart(load_yaml(CHART_DIR / "ci" / "minimal-values.yaml"))
    secrets = {m.doc["metadata"]["name"] for m in manifests if m.doc["kind"] == "Secret"}
    assert secrets == {"tidemark-api-token", "tidemark-kafka-sasl"}
    coordinator = _deployments(manifests)["coordinator"]
    volumes = {v["name"]: v for v in coordinator["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "shared-checkpoints"
    assert coordinator["spec"]["template"]["spec"]["containers"][0]["image"].endswith("@sha256:" + "0" * 64)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"kafka": {"securityProtocol": "SASL_SSL"}}, "kafka.sasl.username is required"),
        ({"checkpointStorage": {"type": "s3"}}, "checkpointStorage.s3.bucket is required"),
        ({"image": {"digest": "sha256:" + "0" * 64}}, "image.digest pins the one base image"),
        ({"worker": {"hosts": {"enabled": True}}, "checkpointStorage": {"filesystem": {"accessModes": [RWX]}}},
         "worker.hosts.enabled needs worker.workers"),
        ({"worker": {"hosts": {"enabled": True}, "workers": 2}},
         "checkpoint storage must be reachable from all of them: set checkpointStorage.type=s3, or a ReadWriteMany"),
        ({"checkpointStorage": {"filesystem": {"accessModes": ["ReadWriteOncePod"]}}},
         "ReadWriteOncePod lets one pod mount the claim"),
        ({"auth": {"existingSecret": "mine", "generate": True}}, "leave auth.apiToken and auth.generate unset"),
        ({"auth": {"existingSecret": "mine", "apiToken": "t"}}, "leave auth.apiToken and auth.generate unset"),
        ({"auth": {"apiToken": "t", "generate": True}}, "auth.apiToken and auth.generate exclude each other"),
    ],
)
def test_inconsistent_values_fail_rendering(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render_chart(values)


@pytest.mark.parametrize(
    "values, offending",
    [
        ({"coordinatr": {"replicaCount": 1}}, "coordinatr"),
        ({"kafka": {"bootstrapServer": "kafka:9092"}}, "bootstrapServer"),
        ({"worker": {"resources": {"request": {"cpu": "1"}}}}, "request"),
        ({"checkpoint": {"mode": "EXACTLY_ONE"}}, "mode"),
        ({"worker": {"stage": 2}}, "stage"),
        ({"worker": {"stages": 0}}, "stages"),
        ({"job": {"upgradeMode": "last_state"}}, "upgradeMode"),
        ({"job": {"initialSavepoint": "x"}}, "initialSavepoint"),
        ({"job": {"startId": "rev 7"}}, "startId"),
        ({"job": {"startId": 7}}, "startId"),
        ({"worker": {"job": "tidemark worker run"}}, "job"),
        ({"coordinator": {"replicaCount": 2}}, "replicaCount"),
        ({"image": {"components": {"coordinatr": {"tag": "1.0"}}}}, "coordinatr"),
        ({"image": {"components": {"worker": {"digest": "latest"}}}}, "digest"),
        ({"image": {"components": {"worker": {"image": "acme/jobs"}}}}, "image"),
        ({"image": {"perComponent": "yes"}}, "perComponent"),
        ({"auth": {"generate": "yes"}}, "generate"),
        ({"networkPolicy": {"enable": True}}, "enable"),
        ({"worker": {"inputTopic": [{"name": "orders"}]}}, "inputTopic"),
        ({"worker": {"inputTopics": {"topics": [{"name": "orders", "partition": 4}]}}}, "partition"),
        ({"worker": {"inputTopics": {"topics": [{"name": "orders", "config": {"retention.ms": 60000}}]}}},
         "retention.ms"),
        ({"worker": {"inputTopics": {"topics": [{"name": "orders topic"}]}}}, "name"),
        ({"coordinator": {"terminationGracePeriodSeconds": -1}}, "terminationGracePeriodSeconds"),
        ({"materializer": {"extraVolumeMounts": [{"name": "x"}]}}, "mountPath"),
        ({"spark": {"master": "yarn"}}, "master"),
        ({"spark": {"master": "spark://spark-master"}}, "master"),
        ({"spark": {"conf": {"executor.cores": "2"}}}, "executor.cores"),
        ({"spark": {"conf": {"spark.executor.cores": 2}}}, "spark.executor.cores"),
        ({"spark": {"mastr": "local[2]"}}, "mastr"),
    ],
)
def test_values_schema_rejects_misspelled_and_invalid_keys(values: dict[str, Any], offending: str) -> None:
    with helm.Chart.load(CHART_DIR) as chart:
        chart.validate_schema({})
        with pytest.raises(helm.HelmValuesError, match=offending):
            chart.validate_schema(values)


def test_every_values_key_is_documented() -> None:
    text = (CHART_DIR / "values.yaml").read_text()
    with helm.Chart.load(CHART_DIR) as chart:
        values = chart.values
    undocumented = [key for key in _leaf_paths(values) if not _documented(key, text)]
    assert undocumented == []


def _leaf_paths(values: dict[str, Any], prefix: str = "") -> list[str]:
    paths = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not path.endswith(("Annotations", "Labels", "resources", "Probe", "stateVolume", "pdb", "SecurityContext", "labels", "annotations", "nodeSelector", "affinity")):
            paths.extend(_leaf_paths(value, path + "."))
        else:
            paths.append(path)
    return paths


def _documented(path: str, text: str) -> bool:
    return f"@param {path} " in text or f"@param {path}." in text


def test_dashboards_ship_as_sidecar_configmaps_identical_to_the_source() -> None:
    configmaps = [m.doc for m in render_chart() if m.doc["kind"] == "ConfigMap"]
    shipped = {name: content for cm in configmaps for name, content in cm["data"].items()}
    source = {p.name: p.read_text() for p in DASHBOARDS_DIR.glob("*.json")}
    assert shipped.keys() == source.keys()
    for name, content in shipped.items():
        assert json.loads(content) == json.loads(source[name]), name
    for cm in configmaps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "Tidemark"


def test_chart_copies_equal_their_sources() -> None:
    for path in DASHBOARDS_DIR.glob("*.json"):
        assert (CHART_DIR / "dashboards" / path.name).read_text() == path.read_text(), path.name
    rules = REPO / "deploy" / "prometheus" / "rules" / "tidemark-alerts.yml"
    assert (CHART_DIR / "files" / "tidemark-alerts.yml").read_text() == rules.read_text()


def test_prometheus_rule_carries_the_alert_rules() -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True}}}
    rule = next(m.doc for m in render_chart(values) if m.doc["kind"] == "PrometheusRule")
    source = load_yaml(REPO / "deploy" / "prometheus" / "rules" / "tidemark-alerts.yml")
    assert rule["spec"]["groups"] == source["groups"]


def test_monitors_honor_the_job_label() -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}}
    manifests = {m.doc["kind"]: m.doc for m in render_chart(values)}
    assert manifests["ServiceMonitor"]["spec"]["endpoints"][0]["honorLabels"] is True
    assert manifests["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True


def test_notes_render() -> None:
    notes = render_notes()
    assert "tidemark-coordinator:9400" in notes and "tidemark-api-token" in notes
    assert "share one node" in notes and "input topics first" in notes and "replication factor 1" in notes


def test_the_chart_needs_kubernetes_1_28() -> None:
    """The worker hosts read the pod-index label StatefulSets set from Kubernetes 1.28 on."""
    assert load_yaml(CHART_DIR / "Chart.yaml")["kubeVersion"] == ">=1.28.0-0"
    assert "apps.kubernetes.io/pod-index" in (CHART_DIR / "templates" / "worker.yaml").read_text()


def test_chart_metadata() -> None:
    chart = load_yaml(CHART_DIR / "Chart.yaml")
    assert chart["apiVersion"] == "v2" and chart["version"] and chart["appVersion"]
    assert Path(CHART_DIR / "templates" / "NOTES.txt").exists()
