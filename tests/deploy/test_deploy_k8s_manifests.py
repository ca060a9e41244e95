"""k8s/ validates strictly, equals the chart's default rendering, and its overlays build with
`kubectl kustomize` into valid manifests."""

from __future__ import annotations

import os
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tidemark.local.quick_start import QUICK_START_ENV
from deploy_support import (
    K8S_DIR,
    NOT_IN_K8S_BASE,
    SERVICE_NAMES,
    assert_runs_service_image,
    expected_k8s_base,
    kustomize_build,
    load_yaml,
    render_chart,
    validate_manifest,
    yaml_documents,
)

K8S_FILES = sorted(K8S_DIR.rglob("*.yaml"))
KUSTOMIZATIONS = sorted(path.parent for path in K8S_DIR.rglob("kustomization.yaml"))


def test_k8s_has_a_base_and_overlays() -> None:
    names = {path.relative_to(K8S_DIR).as_posix() for path in KUSTOMIZATIONS}
    assert "base" in names and {"overlays/dev", "overlays/production"} <= names


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.relative_to(K8S_DIR).as_posix())
def test_every_file_validates_strictly(path: Path) -> None:
    documents = list(yaml_documents(path))
    assert documents, f"{path} holds no document"
    for document in documents:
        validate_manifest(document)


def test_base_equals_the_chart_default_rendering() -> None:
    base = K8S_DIR / "base"
    expected = expected_k8s_base()
    actual = {name: list(yaml_documents(base / name)) for name in expected}
    assert actual == expected, "k8s/base is stale: run .venv/bin/python tests/deploy/deploy_support.py"
    assert set(load_yaml(base / "kustomization.yaml")["resources"]) == set(expected)


def test_only_the_listed_objects_are_left_out_of_the_base() -> None:
    chart = {m.key for m in render_chart()}
    base = {(d["kind"], d["metadata"]["name"]) for d in kustomize_build(K8S_DIR / "base")}
    assert chart - base <= set(NOT_IN_K8S_BASE)  # the chart renders no token Secret by default either
    assert base - chart == set()


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(K8S_DIR).as_posix())
def test_every_kustomization_builds_to_valid_manifests(directory: Path) -> None:
    resources = kustomize_build(directory)
    assert len(resources) == len(kustomize_build(K8S_DIR / "base"))
    for resource in resources:
        validate_manifest(resource)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: p.relative_to(K8S_DIR).as_posix())
def test_every_component_runs_its_image_built_from_services(directory: Path) -> None:
    """Each Deployment runs ghcr.io/tidemark/tidemark-<component> (services/<component>/Dockerfile)."""
    deployments = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in kustomize_build(directory) if d["kind"] == "Deployment"}
    assert set(deployments) == set(SERVICE_NAMES)
    for component, deployment in deployments.items():
        assert_runs_service_image(deployment["spec"]["template"]["spec"]["containers"][0], component)


def test_a_patch_must_name_its_target_as_the_base_has_it(tmp_path: Path) -> None:
    """kustomize matches patches before the overlay's namespace: one without it matches nothing."""
    patch = load_yaml(K8S_DIR / "overlays" / "dev" / "checkpoints-pvc.yaml")
    del patch["metadata"]["namespace"]
    (tmp_path / "pvc.yaml").write_text(yaml.safe_dump(patch))
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "namespace": "elsewhere",
        "resources": [os.path.relpath(K8S_DIR / "base", tmp_path)], "patches": [{"path": "pvc.yaml"}]}))
    with pytest.raises(RuntimeError, match="no resource matches strategic merge patch"):
        kustomize_build(tmp_path)


CHECKPOINT_USERS = ("coordinator", "checkpoint-store", "materializer", "worker")  # the changelog has no claim


def _containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def test_overlays_change_what_they_say() -> None:
    dev = {(r["kind"], r["metadata"]["name"]): r for r in kustomize_build(K8S_DIR / "overlays" / "dev")}
    claim = dev[("PersistentVolumeClaim", "tidemark-checkpoints")]["spec"]
    assert claim["accessModes"] == ["ReadWriteOnce"] and claim["resources"]["requests"]["storage"] == "2Gi"
    assert {r["metadata"]["namespace"] for r in dev.values()} == {"tidemark-dev"}
    worker = dev[("Deployment", "tidemark-worker")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["TIDEMARK_LOG_LEVEL"] == "DEBUG" and env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert {k: env[k] for k in QUICK_START_ENV} == QUICK_START_ENV
    # sized to what it runs: the two-stage example with standbys needs about 4.2 GiB
    assert worker["resources"] == {"requests": {"cpu": "500m", "memory": "4608Mi"}, "limits": {"memory": "5Gi"}}
    for name in ("coordinator", "checkpoint-store", "changelog", "materializer", "worker"):
        pod = dev[("Deployment", f"tidemark-{name}")]["spec"]["template"]["spec"]
        for container in _containers(pod):  # a one-broker Kafka: the base's replication factor 1
            assert {"name": "TIDEMARK_KAFKA__REPLICATION_FACTOR", "value": "1"} in container["env"]
        assert ("affinity" in pod) == (name in CHECKPOINT_USERS)  # the claim's pods share the node
    prod = {(r["kind"], r["metadata"]["name"]): r for r in kustomize_build(K8S_DIR / "overlays" / "production")}
    claim = prod[("PersistentVolumeClaim", "tidemark-checkpoints")]["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"] and claim["storageClassName"] == "shared-ssd"
    for name in ("coordinator", "checkpoint-store", "changelog", "materializer", "worker"):
        deployment = prod[("Deployment", f"tidemark-{name}")]
        assert deployment["spec"]["replicas"] == 1  # singletons: one each
        pod = deployment["spec"]["template"]["spec"]
        assert "affinity" not in pod  # a ReadWriteMany claim: any node
        for container in _containers(pod):
            env = {e["name"]: e for e in container["env"]}
            assert env["TIDEMARK_KAFKA__SECURITY_PROTOCOL"]["value"] == "SASL_SSL", (name, container["name"])
            assert env["TIDEMARK_KAFKA__REPLICATION_FACTOR"]["value"] == "3"
            assert env["TIDEMARK_KAFKA__SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "tidemark-kafka-sasl"
            assert "kafka-ca" in {m["name"] for m in container["volumeMounts"]}
    coordinator = prod[("Deployment", "tidemark-coordinator")]["spec"]["template"]["spec"]
    assert {v["name"] for v in coordinator["volumes"]} >= {"kafka-ca", "checkpoints", "state", "tmp"}
    topics = prod[("Deployment", "tidemark-worker")]["spec"]["template"]["spec"]["initContainers"]
    assert [(c["name"], c["args"][:3]) for c in topics] == [("create-topic-0", ["topics", "create", "access-log"])]
    assert all(r["metadata"]["labels"]["environment"] == "production" for r in prod.values())


def test_the_base_needs_only_the_token_secret_and_creates_the_input_topic() -> None:
    base = kustomize_build(K8S_DIR / "base")
    assert not [r for r in base if r["kind"] == "Secret"]
    kustomization = (K8S_DIR / "base" / "kustomization.yaml").read_text()
    assert "create secret generic tidemark-api-token" in kustomization
    claims = [r["spec"]["accessModes"] for r in base if r["kind"] == "PersistentVolumeClaim"]
    assert claims == [["ReadWriteOnce"]]
    worker = next(r for r in base if r["kind"] == "Deployment" and r["metadata"]["name"] == "tidemark-worker")
    assert worker["spec"]["template"]["spec"]["initContainers"][0]["args"][:3] == ["topics", "create", "access-log"]


def test_validation_is_strict_and_never_skips_a_kind() -> None:
    deployment = next(r for r in kustomize_build(K8S_DIR / "base") if r["kind"] == "Deployment")
    typo = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_manifest(typo)
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "m"},
               "spec": {"selector": {}, "endpoint": [{"port": "http"}]}}
    with pytest.raises(jsonschema.ValidationError):
        validate_manifest(monitor)
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate_manifest({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})
