"""Alert rules and the Prometheus config pass promtool; the rules' unit tests pass; every alert links
to its runbook in docs/operations.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_support import CHART_DIR, REPO, load_yaml

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules" / "tidemark-alerts.yml"
RULE_TESTS = PROMETHEUS_DIR / "tests" / "tidemark-alerts.test.yml"
RULE_FILES = sorted(PROMETHEUS_DIR.glob("rules/*.yml")) + sorted(CHART_DIR.glob("files/*.yml"))
OPERATIONS_DOC = REPO / "docs" / "operations.md"
RULE_COUNT = 12


def _promtool(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("`promtool` is not installed: run scripts/install-system-deps.sh (Debian's prometheus package)")
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_check_rules() -> None:
    result = _promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {RULE_COUNT} rules found" in result.stdout


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


def _rules(path: Path) -> list[dict[str, Any]]:
    return [rule for group in load_yaml(path)["groups"] for rule in group["rules"]]


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    evaluations: dict[str, list[list[Any]]] = {}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for test in case.get("alert_rule_test", []):
            evaluations.setdefault(test["alertname"], []).append(test["exp_alerts"])
    for rule in _rules(RULES):
        expected = evaluations.get(rule["alert"], [])
        assert [] in expected and any(expected), f"{rule['alert']}: no test where it fires and one where it does not"
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _runbooks() -> dict[str, str]:
    """Anchor -> text of each ``###`` section under "## Alerts" in docs/operations.md."""
    alerts = OPERATIONS_DOC.read_text().split("\n## Alerts\n", 1)[1].split("\n## ", 1)[0]
    sections = re.split(r"^### (.+)$", alerts, flags=re.MULTILINE)
    return {github_anchor(heading): text for heading, text in zip(sections[1::2], sections[2::2])}


def test_github_anchor() -> None:
    assert github_anchor("TidemarkTargetDown") == "tidemarktargetdown"
    assert github_anchor("The checkpoints page") == "the-checkpoints-page"
    assert github_anchor("S3 checkpoint storage") == "s3-checkpoint-storage"
    assert github_anchor("Docker-compose: `prometheus.yml`") == "docker-compose-prometheusyml"


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_alert_links_to_its_runbook(path: Path) -> None:
    """Each rule's runbook_url is the repository's docs/operations.md (the chart's ``home``) at an
    anchor of a section under "## Alerts" that says what the alert means, how to confirm it and
    what to do."""
    docs_url = f"{load_yaml(CHART_DIR / 'Chart.yaml')['home']}/blob/main/docs/operations.md#"
    runbooks = _runbooks()
    rules = _rules(path)
    assert len(rules) == RULE_COUNT
    for rule in rules:
        url = rule["annotations"].get("runbook_url", "")
        assert url.startswith(docs_url), f"{rule['alert']}: runbook_url {url!r}"
        anchor = url[len(docs_url):]
        assert anchor == github_anchor(rule["alert"]) and anchor in runbooks, f"{rule['alert']}: no section #{anchor}"
        for part in ("**Means**", "**Confirm**", "**Do**"):
            assert part in runbooks[anchor], f"{rule['alert']}: its runbook has no {part}"
    assert set(runbooks) == {github_anchor(rule["alert"]) for rule in rules}, "a runbook of no alert"


def test_compose_prometheus_config_loads_the_rules(tmp_path: Path) -> None:
    config = (PROMETHEUS_DIR / "prometheus.yml").read_text()
    assert "/etc/prometheus/rules/*.yml" in config
    (tmp_path / "prometheus.yml").write_text(config.replace("/etc/prometheus/rules/*.yml", str(RULES)))
    result = _promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {RULE_COUNT} rules found" in result.stdout


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
