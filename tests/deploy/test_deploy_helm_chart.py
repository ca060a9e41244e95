"""The Helm chart lints, renders for every values variant, and renders valid, hardened manifests."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from deploy_support import (
    CHART_DIR,
    DASHBOARDS_DIR,
    REPO,
    SERVICE_NAMES,
    Manifest,
    assert_runs_service_image,
    ci_values_files,
    load_yaml,
    render_chart,
    render_notes,
    validate_manifest,
)

VARIANTS = [pytest.param({}, id="defaults")] + [
    pytest.param(load_yaml(path), id=path.name) for path in ci_values_files()
]
COMPONENTS = list(SERVICE_NAMES)


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
        pdb_enabled = values.get(_values_key(component), {}).get("pdb", {}).get("enabled", True)
        assert (f"tidemark-{component}" in pdbs) == pdb_enabled


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
        assert env["TIDEMARK_KAFKA__REPLICATION_FACTOR"] == "3"
        assert env["TIDEMARK_CHECKPOINT_STORAGE_URL"] == "file:///var/lib/tidemark/checkpoints"
        assert_runs_service_image(container, component)
        assert container["image"] == f"ghcr.io/tidemark/tidemark-{component}:0.1.0"
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
    assert no_registry["worker"]["image"] == "tidemark/tidemark-worker:0.1.0"


def test_a_jobs_own_worker_image() -> None:
    """An image FROM tidemark-worker that adds the job's module, in its own repository."""
    for per_component in (True, False):
        containers = _containers({"image": {"perComponent": per_component, "components": {"worker": {
            "registry": "registry.example.com", "repository": "acme/orders-jobs", "tag": "1.4.0"}}},
            "worker": {"job": "acme_jobs.orders:job"}})
        assert containers["worker"]["image"] == "registry.example.com/acme/orders-jobs:1.4.0"
        assert containers["worker"]["args"][:3] == ["jobs", "run", "acme_jobs.orders:job"]
        suffix = "-coordinator" if per_component else ""
        assert containers["coordinator"]["image"] == f"ghcr.io/tidemark/tidemark{suffix}:0.1.0"


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
    ({"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT}, ["--from-savepoint", SAVEPOINT]),
    ({"upgradeMode": "stateless"}, ["--fresh", "--start-id", DEFAULT_START_ID]),
    ({"upgradeMode": "stateless", "startId": "rev-7"}, ["--fresh", "--start-id", "rev-7"]),
    ({"upgradeMode": "savepoint", "initialSavepointPath": SAVEPOINT, "allowNonRestoredState": True},
     ["--from-savepoint", SAVEPOINT, "--allow-non-restored-state"]),
], ids=["last-state", "last-state-initial-savepoint", "savepoint", "stateless", "stateless-start-id",
        "savepoint-allow-non-restored-state"])
def test_job_upgrade_modes_render_the_start_arguments(job: dict[str, Any], start: list[str]) -> None:
    """The rendered arguments are the same for the first start and every restart of the pod;
    ``tidemark jobs run`` makes a restart resume the job's newest state in each mode (an initial
    savepoint is used only while the job has no newer state; --fresh with a start id it already
    started resumes what that start retained). tests/e2e/test_production_continuity.py runs
    these arguments: no --from-* (the SIGKILL of the whole tree) and --from-savepoint (the
    upgrade in savepoint mode); tests/e2e/test_chart_started_worker.py runs the rendered
    last-state and stateless containers twice."""
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


@pytest.mark.parametrize("job, message", [
    ({"upgradeMode": "savepoint"}, "job.initialSavepointPath is required with job.upgradeMode=savepoint"),
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
                                           ["http", "process-0", "process-1"]),
                                          ({"enabled": False}, ["http"])])
def test_monitors_scrape_every_stage_of_the_worker(worker: dict[str, Any], ports: list[str]) -> None:
    values = {"worker": worker, "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}}
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
        assert [p["name"] for p in container["ports"]] == ["http", "process-0", "process-1"]
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


def test_large_integers_render_as_plain_digits() -> None:
    deployments = _deployments(render_chart({"checkpoint": {"timeoutMs": 86400000}}))
    assert _env(deployments["coordinator"])["TIDEMARK_CHECKPOINT__TIMEOUT_MS"] == "86400000"


def test_api_token_is_generated_into_a_secret() -> None:
    secrets = [m.doc for m in render_chart() if m.doc["kind"] == "Secret"]
    assert [s["metadata"]["name"] for s in secrets] == ["tidemark-api-token"]
    token = base64.b64decode(secrets[0]["data"]["api-token"]).decode()
    assert len(token) == 40 and token.isalnum()
    again = next(m.doc for m in render_chart() if m.doc["kind"] == "Secret")
    assert again["data"]["api-token"] != secrets[0]["data"]["api-token"]


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
        ({"worker": {"hosts": {"enabled": True}}}, "worker.hosts.enabled needs worker.workers"),
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


def test_chart_metadata() -> None:
    chart = load_yaml(CHART_DIR / "Chart.yaml")
    assert chart["apiVersion"] == "v2" and chart["version"] and chart["appVersion"]
    assert Path(CHART_DIR / "templates" / "NOTES.txt").exists()
