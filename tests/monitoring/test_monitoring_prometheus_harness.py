"""The monitoring harness works against a real Prometheus scraping a real exporter process.

The full check, every panel returning data against the embedded pipeline, is
``prom_harness.assert_every_panel_has_data(prometheus.url, DASHBOARDS_DIR, job)`` once the
services expose their metrics; these tests prove the harness and the dashboards' PromQL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest

from metric_catalog import load_catalog
from prom_harness import (
    PrometheusProcess,
    assert_every_panel_has_data,
    dashboard_queries,
    empty_panel_queries,
    instant_query,
    substitute,
)

DASHBOARDS_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "tidemark"
JOB = "access.log"  # a dot, so the harness must escape it in the $job regex
TRIGGERED = 'sum by (job) (rate(tidemark_checkpoints_triggered_total{job=~"$job"}[$__rate_interval]))'


@pytest.fixture(scope="module")
def scraped(
    prometheus_factory: Callable[[list[str]], PrometheusProcess],
    exporter_factory: Callable[[list[dict[str, Any]], str], str],
) -> tuple[PrometheusProcess, str]:
    """One exporter process serving the documented metrics, scraped by one Prometheus."""
    target = exporter_factory([metric.as_exporter_entry() for metric in load_catalog()], JOB)
    return prometheus_factory([target]), target


def _dashboard(directory: Path, exprs: dict[str, str]) -> Path:
    directory.mkdir(parents=True)
    panels = [
        {"id": i, "type": "timeseries", "title": title, "targets": [{"refId": "A", "expr": expr}]}
        for i, (title, expr) in enumerate(exprs.items(), start=1)
    ]
    dashboard = {
        "uid": "probe", "title": "Probe", "schemaVersion": 39,
        "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"},
                                {"name": "job", "type": "query"}]},
        "panels": [{"id": 100, "type": "row", "title": "row", "panels": panels}],
    }
    (directory / "probe.json").write_text(json.dumps(dashboard))
    return directory


def test_prometheus_scrapes_the_exporter(scraped: tuple[PrometheusProcess, str]) -> None:
    prometheus, target = scraped
    found = prometheus.query(f'tidemark_checkpoints_triggered_total{{job="{JOB}"}}')
    assert len(found) == 1 and float(found[0]["value"][1]) >= 1
    assert found[0]["metric"]["instance"] == target
    assert prometheus.query("tidemark_no_such_metric_total") == []
    # a metric without its own job label gets the scrape job's name
    assert prometheus.query('tidemark_changelog_delete_records_unsupported_total{job="tidemark"}')
    assert prometheus.query("process_resident_memory_bytes")


def test_empty_panels_are_reported_and_data_panels_pass(tmp_path: Path, scraped: tuple[PrometheusProcess, str]) -> None:
    prometheus, _ = scraped
    assert_every_panel_has_data(prometheus.url, _dashboard(tmp_path / "good", {"triggered": TRIGGERED}), JOB)
    probe = _dashboard(tmp_path / "probe", {"triggered": TRIGGERED, "bogus": 'sum(tidemark_bogus_metric{job=~"$job"})'})
    assert [q.panel for q in empty_panel_queries(prometheus.url, probe, JOB)] == ["bogus"]
    assert [q.panel for q in empty_panel_queries(prometheus.url, probe, "access_log")] == ["triggered", "bogus"]
    with pytest.raises(AssertionError, match=r"1 dashboard queries return no data:\n  Probe / bogus \[A\]"):
        assert_every_panel_has_data(prometheus.url, probe, JOB, timeout=1.0)
    # queries of series the scenario must not create: no data passes, data fails
    assert_every_panel_has_data(prometheus.url, probe, JOB, timeout=1.0, expect_empty=lambda q: q.panel == "bogus")
    with pytest.raises(AssertionError, match=r"1 dashboard queries return data but should return none:\n"
                                             r"  Probe / triggered \[A\]"):
        assert_every_panel_has_data(prometheus.url, probe, JOB, timeout=1.0, expect_empty=lambda q: True)


def test_every_dashboard_query_is_valid_promql(scraped: tuple[PrometheusProcess, str]) -> None:
    prometheus, _ = scraped
    queries = dashboard_queries(DASHBOARDS_DIR, job=None)
    assert len(queries) >= 40
    for query in queries:
        instant_query(prometheus.url, query.expr)  # raises PromQLError on a bad expression


def test_every_panel_has_data_against_the_documented_metrics(scraped: tuple[PrometheusProcess, str]) -> None:
    """Against an exporter serving the docs/operations.md table, every panel returns data.

    This checks the dashboards against the metrics contract (names, labels, types); it does not
    replace the check against the running pipeline.
    """
    prometheus, _ = scraped
    assert_every_panel_has_data(prometheus.url, DASHBOARDS_DIR, JOB, timeout=20.0)


def test_template_substitution() -> None:
    values = {"job": "a\\\\.b", "service": ".+", "__rate_interval": "30s"}
    expr = 'rate(x{job=~"$job",service=~"${service}"}[$__rate_interval]) + y{job=~"[[job]]"} + z{s=~"${service:regex}"}'
    assert substitute(expr, values) == 'rate(x{job=~"a\\\\.b",service=~".+"}[30s]) + y{job=~"a\\\\.b"} + z{s=~".+"}'
    with pytest.raises(KeyError, match="unknown"):
        substitute('x{a=~"$unknown"}', values)
