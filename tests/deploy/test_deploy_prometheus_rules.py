"""Alert rules and the Prometheus config pass promtool; the rules' unit tests pass."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from deploy_support import REPO

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules" / "tidemark-alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "tests" / "tidemark-alerts.test.yml"


def _promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("`promtool` is not installed: run scripts/install-system-deps.sh (Debian's prometheus package)")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_check_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_rule_unit_tests() -> None:
    result = _promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_rule_unit_tests_catch_a_broken_rule(tmp_path: Path) -> None:
    """The unit tests are not vacuous: weakening a threshold makes them fail."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(RULES.read_text().replace("> 900", "> 9000"))
    (tmp_path / "tests" / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    result = _promtool("test", "rules", str(tmp_path / "tests" / RULE_TESTS.name))
    assert result.returncode != 0 and "TidemarkNoRecentCheckpoint" in result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_annotations() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    tested = RULE_TESTS.read_text()
    for rule in rules:
        assert f"alertname: {rule['alert']}" in tested, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_compose_prometheus_config_loads_the_rules(tmp_path: Path) -> None:
    config = (PROMETHEUS_DIR / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/*.yml" in config
    (tmp_path / "prometheus.yml").write_text(config.replace("/etc/prometheus/rules/*.yml", str(RULES)))
    result = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 8 rules found" in result.stdout


def test_install_script_is_idempotent_and_fast() -> None:
    script = REPO / "scripts" / "install-system-deps.sh"
    missing = [p for p in ("openjdk-17-jre-headless", "maven", "prometheus", "docker-compose", "chromium")
               if subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout
               != "install ok installed"]
    if missing:
        pytest.fail(f"system packages missing: {missing}: run {script}")
    result = subprocess.run([str(script)], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0 and "all present" in result.stdout, result.stderr


def test_install_script_fails_clearly_when_it_cannot_install(tmp_path: Path) -> None:
    """With the packages missing and no apt-get on PATH it exits non-zero naming them."""
    (tmp_path / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "dpkg-query").chmod(0o755)
    for tool in ("grep", "id"):
        (tmp_path / tool).symlink_to(shutil.which(tool))
    script = REPO / "scripts" / "install-system-deps.sh"
    result = subprocess.run(["/bin/bash", str(script)], capture_output=True, text=True, timeout=10,
                            env={"PATH": str(tmp_path)})
    assert result.returncode == 1
    assert ("cannot install openjdk-17-jre-headless maven prometheus docker-compose chromium postgresql: "
            "apt-get not found") in result.stderr
