"""The Grafana dashboards are importable JSON that only query documented metrics."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from metric_catalog import load_catalog
from prom_harness import dashboard_queries

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS_ROOT = REPO / "dashboards"
DASHBOARDS_DIR = DASHBOARDS_ROOT / "tidemark"
DASHBOARDS = sorted(DASHBOARDS_DIR.glob("*.json"))
ALERT_RULES = REPO / "deploy" / "prometheus" / "rules" / "tidemark-alerts.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PROCESS_METRICS = {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for panel in panels:
        found.append(panel)
        found.extend(_panels(panel.get("panels", [])))
    return found


def test_one_folder_of_dashboards() -> None:
    assert [p.parent for p in DASHBOARDS_ROOT.rglob("*.json")] == [DASHBOARDS_DIR] * len(DASHBOARDS)
    titles = {_load(p)["title"].split(" / ")[0] for p in DASHBOARDS}
    assert len(DASHBOARDS) == 4 and titles == {"Tidemark"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable(path: Path) -> None:
    dashboard = _load(path)
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] and len(dashboard["uid"]) <= 40 and dashboard["title"]
    assert "id" not in dashboard or dashboard["id"] is None
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    job = variables["job"]
    assert job["type"] == "query" and job["datasource"] == DATASOURCE
    assert re.fullmatch(r"label_values\(\w+, job\)", job["definition"])
    assert job["query"]["query"] == job["definition"]
    ids = [p["id"] for p in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))
    for panel in _panels(dashboard["panels"]):
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE and target["expr"] and target["refId"]


def test_dashboard_uids_are_unique() -> None:
    uids = [_load(p)["uid"] for p in DASHBOARDS]
    assert len(uids) == len(set(uids))


def test_no_hard_coded_instance_or_datasource() -> None:
    for path in DASHBOARDS:
        text = path.read_text()
        assert "instance=" not in text and "instance=~" not in text, path.name
        assert not re.search(r"localhost|127\.0\.0\.1|:\d{4}\b", text), path.name
        uids = set(re.findall(r'"uid":\s*"([^"]*)"', text)) - {_load(path)["uid"], "${datasource}", "-- Grafana --"}
        assert uids == set(), f"{path.name} hard-codes datasource uids {uids}"


def test_job_filter_is_applied_to_every_job_metric() -> None:
    catalog = {m.name: m for m in load_catalog()}
    for query in dashboard_queries(DASHBOARDS_DIR, job="orders"):
        for name in _metric_names(query.expr):
            metric = catalog.get(name)
            if metric is not None and "job" in metric.labels:
                assert re.search(rf'{name}\w*\{{[^}}]*job=~"orders"', query.expr), str(query)


def _metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:tidemark|process)_\w+)", expr))
    return {re.sub(r"_bucket$", "", name) for name in names}


def test_dashboards_and_alerts_use_only_documented_metrics() -> None:
    documented = {m.name for m in load_catalog()} | PROCESS_METRICS
    used = set().union(*(_metric_names(q.expr) for q in dashboard_queries(DASHBOARDS_DIR)))
    used |= _metric_names(ALERT_RULES.read_text())
    assert used - documented == set()


def test_every_documented_metric_is_on_a_dashboard() -> None:
    used = set().union(*(_metric_names(q.expr) for q in dashboard_queries(DASHBOARDS_DIR)))
    missing = {m.name for m in load_catalog()} - used
    assert missing == set()


def test_the_issue_panels_exist() -> None:
    titles = {_load(p)["uid"]: {panel["title"] for panel in _panels(_load(p)["panels"])} for p in DASHBOARDS}
    assert {"Checkpoints per second by outcome", "Duration against timeout", "Checkpointed size against full size",
            "In progress", "Since last completed", "Restores (range)"} <= titles["tidemark-checkpoints"]
    assert {"Pending changelog bytes by operator", "Materializations per second by outcome"} <= titles["tidemark-changelog"]
    assert {"Records per second", "Consumer lag by topic", "Barrier alignment time", "CPU per worker process",
            "Resident memory per worker process", "JVM heap used against max",
            "Micro-batch duration"} <= titles["tidemark-worker"]
    assert {"Ready", "Dead letters per second"} <= titles["tidemark-services"]
