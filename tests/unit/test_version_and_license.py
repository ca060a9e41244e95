"""The version has one source (``pyproject.toml``'s ``version``, read back from the installed
distribution), ``tidemark --version`` prints it, and the project's license is the file its
metadata names. (The wheel carrying the LICENSE file and the image's ``tidemark --version``:
``tests/deploy/test_deploy_packaging.py``.)"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from typer.testing import CliRunner

import tidemark
from tidemark.cli import app

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_version_is_pyproject_s_read_back_from_the_installed_distribution() -> None:
    assert tidemark.__version__ == importlib.metadata.version("tidemark") == PROJECT["version"]


def test_tidemark_version_prints_it_and_exits_0() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert (result.exit_code, result.output) == (0, f"tidemark {PROJECT['version']}\n")


def test_the_license_file_is_the_apache_license_the_metadata_names() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text


def _spelled_versions() -> dict[str, set[str]]:
    """The versions the files that cannot read pyproject.toml spell out: the Helm chart's
    ``appVersion``, the service images' default base image, the compose file's and the
    Kubernetes manifests' image tags and version labels."""
    import re

    tag = re.compile(r"\btidemark(?:-[a-z-]+)?:(\d+\.\d+[\w.+-]*)")
    label = re.compile(r"app\.kubernetes\.io/version: \"?([\w.+-]+)")
    found: dict[str, set[str]] = {}
    chart = (REPO / "helm" / "tidemark" / "Chart.yaml").read_text()
    found["helm/tidemark/Chart.yaml"] = set(re.findall(r"^appVersion: \"?([\w.+-]+)\"?$", chart, re.M))
    for path in [*REPO.glob("services/*/Dockerfile"), REPO / "docker-compose.yml", *REPO.glob("k8s/base/*.yaml")]:
        text = path.read_text()
        if versions := set(tag.findall(text)) | set(label.findall(text)):
            found[path.relative_to(REPO).as_posix()] = versions
    return found


def test_every_file_that_spells_the_version_spells_pyproject_s() -> None:
    """A version bump changes pyproject.toml and these files together (docs/guide/packaging.md)."""
    found = _spelled_versions()
    assert found["helm/tidemark/Chart.yaml"] and "docker-compose.yml" in found
    assert {path: versions for path, versions in found.items() if versions != {PROJECT["version"]}} == {}
