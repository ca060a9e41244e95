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
