"""docker-compose.yml validates with Debian's docker-compose and wires the whole topology; each
Tidemark service runs its own image, built from services/<name>/Dockerfile over the base image."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from deploy_support import REPO, SERVICE_NAMES, VERSION, service_command, service_dockerfile
from dockerfile_replay import base_image, parse_dockerfile

TIDEMARK_SERVICES = {"coordinator": 9400, "checkpoint-store": 9401, "changelog": 9402, "materializer": 9403, "worker": 9404}
STAGE_PORTS = (9405, 9406)  # the worker's stage i serves its metrics on 9404 + 1 + i
WORKER_COMMAND = ["jobs", "run", "tidemark.examples.access_log:top_urls"]
BASE_IMAGE = f"tidemark:{VERSION}"  # built from the top-level Dockerfile by the one-shot tidemark-image
# run to completion before what depends on them starts; no health check
ONE_SHOT = {"create-topics", "tidemark-image"}
INSTALL_HINT = "run scripts/install-system-deps.sh (installs Debian's docker-compose package)"


def _compose(*args: str, token: str | None = "test-token") -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail(f"`docker-compose` is not installed: {INSTALL_HINT}")
    env = {k: v for k, v in os.environ.items() if k != "TIDEMARK_API_TOKEN"}
    if token is not None:
        env["TIDEMARK_API_TOKEN"] = token
    return subprocess.run([binary, "-f", str(REPO / "docker-compose.yml"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    result = _compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_docker_compose_accepts_the_file() -> None:
    result = _compose("config", "--quiet")
    assert result.returncode == 0, result.stderr
    assert _compose("--profile", "schema-registry", "config", "--quiet").returncode == 0


def test_the_api_token_is_required() -> None:
    result = _compose("config", "--quiet", token=None)
    assert result.returncode != 0 and "TIDEMARK_API_TOKEN" in result.stderr


def test_topology(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"kafka", "schema-registry", "prometheus", "grafana", "generator", *ONE_SHOT,
                             *TIDEMARK_SERVICES}
    assert services["schema-registry"]["profiles"] == ["schema-registry"]
    assert services["generator"]["profiles"] == ["generator"]
    kafka = services["kafka"]
    assert re.fullmatch(r"apache/kafka:\d+\.\d+\.\d+", kafka["image"])
    assert kafka["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    for name, service in services.items():
        assert not service["image"].endswith(":latest") and ":" in service["image"], name
        if name in ONE_SHOT:
            assert service["restart"] == "no", name
            waiting = [s for s in services.values() if s.get("depends_on", {}).get(name)]
            assert waiting and all(s["depends_on"][name]["condition"] == "service_completed_successfully"
                                   for s in waiting), name
        else:
            assert "healthcheck" in service, f"{name} has no healthcheck"


def test_the_kraft_cluster_id_is_a_kafka_uuid(config: dict[str, Any]) -> None:
    """As `kafka-storage random-uuid` prints it: 16 bytes in base64url without padding."""
    cluster_id = config["services"]["kafka"]["environment"]["CLUSTER_ID"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id), cluster_id
    raw = base64.urlsafe_b64decode(cluster_id + "==")
    assert len(raw) == 16 and base64.urlsafe_b64encode(raw).decode().rstrip("=") == cluster_id
    assert raw != bytes(16) and not cluster_id.startswith("-")  # Kafka never generates these


def test_the_input_topic_is_created_before_the_job_starts(config: dict[str, Any]) -> None:
    services = config["services"]
    create = services["create-topics"]
    assert create["image"] == services["kafka"]["image"]
    command = create["entrypoint"] + create["command"]
    args = _job_args(services["worker"])
    assert command[command.index("--topic") + 1] == args["input_topic"]
    assert "--if-not-exists" in command
    assert services["worker"]["depends_on"]["create-topics"]["condition"] == "service_completed_successfully"


def _job_args(service: dict[str, Any]) -> dict[str, Any]:
    command = service["command"]
    return json.loads(command[command.index("--job-args") + 1])


def test_the_base_image_is_built_first_from_the_top_level_dockerfile(config: dict[str, Any]) -> None:
    services = config["services"]
    for name in ["tidemark-image", "generator"]:
        assert services[name]["image"] == BASE_IMAGE, name
        assert services[name]["build"] == {"context": str(REPO), "dockerfile": "Dockerfile"}, name
    assert "command" not in services["tidemark-image"]  # the base image's CMD (--help): it exits 0
    for name in TIDEMARK_SERVICES:  # docker-compose builds and starts in dependency order
        assert services[name]["depends_on"]["tidemark-image"] == {"condition": "service_completed_successfully"}


def test_each_tidemark_service_runs_its_image_built_from_services_dockerfile(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(TIDEMARK_SERVICES) == set(SERVICE_NAMES)
    for name, port in TIDEMARK_SERVICES.items():
        service = services[name]
        assert service["image"] == f"tidemark-{name}:{VERSION}"
        assert service["build"]["context"] == str(service_dockerfile(name).parent)
        assert service["build"].get("dockerfile", "Dockerfile") == "Dockerfile"
        assert service["build"]["args"] == {"TIDEMARK_IMAGE": BASE_IMAGE}
        assert base_image(service_dockerfile(name), service["build"]["args"]) == BASE_IMAGE
        if name == "worker":  # the job's command line
            assert service["command"][:3] == WORKER_COMMAND == service_command(name)
        else:  # the image's CMD
            assert "command" not in service and "entrypoint" not in service, name
            assert service_command(name) == ["run", name]
        dockerfile_port = parse_dockerfile(service_dockerfile(name))[-1].last("ENV").assignments()
        assert dockerfile_port["TIDEMARK_HTTP_PORT"] == str(port)
        assert service["environment"]["TIDEMARK_HTTP_PORT"] == str(port)
        assert service["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
        assert service["environment"]["TIDEMARK_HTTP_HOST"] == "0.0.0.0"
        assert service["environment"]["TIDEMARK_API_TOKEN"] == "test-token"  # every port but probes needs it
        assert f"127.0.0.1:{port}/readyz" in " ".join(service["healthcheck"]["test"])
        assert service["read_only"] is True
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
    worker_deps = services["worker"]["depends_on"]
    assert {k: v["condition"] for k, v in worker_deps.items()} == {
        **{name: "service_healthy" for name in ["kafka", "coordinator", "checkpoint-store", "changelog", "materializer"]},
        "create-topics": "service_completed_successfully",
        "tidemark-image": "service_completed_successfully",
    }


def test_the_worker_runs_the_two_stage_job_through_the_coordinator(config: dict[str, Any]) -> None:
    services = config["services"]
    worker = services["worker"]
    env = worker["environment"]
    assert env["TIDEMARK_COORDINATOR_URL"] == "http://coordinator:9400"
    assert env["TIDEMARK_API_TOKEN"] == "test-token"  # the coordinator's token
    args = _job_args(worker)
    assert {"job_id", "input_topic", "channel_topic", "output_topic"} <= set(args)
    assert {str(p) for p in (9404, *STAGE_PORTS)} <= {str(p) for p in worker["expose"]}
    # jobs run as this workload, not as children of the coordinator
    assert services["coordinator"]["environment"]["TIDEMARK_JOBS__LAUNCHER"] == "none"


def test_prometheus_scrapes_every_process_and_grafana_is_provisioned(config: dict[str, Any]) -> None:
    prometheus_config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    tidemark_job = next(job for job in prometheus_config["scrape_configs"] if job["job_name"] == "tidemark")
    assert tidemark_job["honor_labels"] is True
    # the services and the supervisor at fixed addresses; the worker processes that run, as the
    # supervisor lists them (tests/deploy/test_deploy_prometheus_discovery.py)
    assert set(tidemark_job["static_configs"][0]["targets"]) == {f"{n}:{p}" for n, p in TIDEMARK_SERVICES.items()}
    assert tidemark_job["http_sd_configs"] == [{"url": "http://worker:9404/targets", "refresh_interval": "15s"}]
    grafana_mounts = {v.split(":")[1] for v in config["services"]["grafana"]["volumes"] if isinstance(v, str)} | {
        v["target"] for v in config["services"]["grafana"]["volumes"] if isinstance(v, dict)
    }
    assert {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards/tidemark"} <= grafana_mounts
    provider = yaml.safe_load((REPO / "deploy" / "grafana" / "provisioning" / "dashboards" / "tidemark.yml").read_text())
    assert provider["providers"][0]["folder"] == "Tidemark"
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards/tidemark"
    datasource = yaml.safe_load((REPO / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"


def test_service_dockerfiles_are_thin_layers_of_the_one_image() -> None:
    top = (REPO / "Dockerfile").read_text()
    assert re.search(r"^USER 10001", top, re.MULTILINE) and "openjdk-17-jre-headless" in top
    for name in TIDEMARK_SERVICES:
        text = (REPO / "services" / name / "Dockerfile").read_text()
        froms = re.findall(r"^FROM (.+)$", text, re.MULTILINE)
        assert froms == ["${TIDEMARK_IMAGE}"], name
        assert base_image(service_dockerfile(name)) == BASE_IMAGE
        command = WORKER_COMMAND if name == "worker" else ["run", name]
        assert service_command(name) == command
        assert not list(service_dockerfile(name).parent.glob("*.py")), f"{name}: the image runs its CMD only"
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert ignored[1] == "**" and "!src/**" in ignored
