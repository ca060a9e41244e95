"""A real Prometheus for tests, and evaluation of every dashboard panel's PromQL through it.

Contracts:
- ``PrometheusProcess`` runs the Debian ``prometheus`` binary on a free loopback port with a
  generated config scraping the given ``host:port`` targets every second (``honor_labels: true``,
  as deployed, so Tidemark's own ``job`` label survives). Lifecycle: ``start()`` once, then
  ``wait_for_targets_up()``, ``query()`` any number of times, ``stop()`` exactly once (idempotent);
  it is also a context manager. A missing binary raises ``MissingBinary`` naming the installer.
  With ``config`` it runs that configuration instead (its targets found however it says);
  ``active_targets()`` is then what it scrapes: each target's ``instance`` and health.
- ``dashboard_queries(dir, job)`` returns every PromQL expression of every panel (rows and nested
  panels included) of every ``*.json`` dashboard in ``dir`` with template variables substituted.
- ``empty_panel_queries(url, dir, job)`` evaluates them through ``/api/v1/query`` and returns the
  ones that return no data; an expression Prometheus rejects raises ``PromQLError``.
- ``assert_every_panel_has_data(url, dir, job)`` retries for ``timeout`` seconds (rates need two
  scrapes) and then fails naming every empty panel. With ``expect_empty``, the queries it accepts
  must return no data instead (series the scenario must not create), and the failure names those
  that do.
- ``metric_names(expr)`` is the set of Tidemark and ``process_*`` metric names an expression
  reads (a histogram's ``_bucket`` series under the histogram's name).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

INSTALL_HINT = "run scripts/install-system-deps.sh (installs Debian's prometheus package)"
BUILTIN_INTERVALS = {
    "__rate_interval": "30s",
    "__interval": "15s",
    "__range": "5m",
    "__range_s": "300",
    "__interval_ms": "15000",
}


class MissingBinary(RuntimeError):
    """A required system binary is not installed."""


class PromQLError(RuntimeError):
    """Prometheus rejected an expression."""


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise MissingBinary(f"`{name}` is not installed: {INSTALL_HINT}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def _get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read() or b"{}") | {"http_status": error.code}


def scrape_config(targets: Sequence[str], scrape_interval: str = "1s") -> str:
    """Prometheus config scraping ``targets`` like the deployed one does."""
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {
                "job_name": "tidemark",
                "honor_labels": True,
                "scrape_timeout": scrape_interval,
                "static_configs": [{"targets": list(targets)}],
            }
        ],
    }
    return json.dumps(config, indent=2)  # JSON is valid YAML


class PrometheusProcess:
    """One Prometheus server process scraping fixed targets (see the module contract)."""

    def __init__(self, targets: Sequence[str], workdir: Path | None = None, config: str | None = None) -> None:
        self.targets = list(targets)
        self._config = config
        self._binary = require_binary("prometheus")
        self._own_dir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="tidemark-prom-")) if workdir is None else workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._log = self.workdir / "prometheus.log"

    def start(self, timeout: float = 20.0) -> PrometheusProcess:
        config = self.workdir / "prometheus.yml"
        config.write_text(scrape_config(self.targets) if self._config is None else self._config)
        command = [
            self._binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout}s: {self.log_tail()}")

    def active_targets(self) -> dict[str, str]:
        """``instance`` -> health (``up``, ``down``, ``unknown``: not scraped yet) of every target."""
        active = _get_json(f"{self.url}/api/v1/targets?state=active")["data"]["activeTargets"]
        return {t["labels"]["instance"]: t["health"] for t in active}

    def wait_for_targets_up(self, timeout: float = 20.0) -> None:
        """Block until every target has been scraped successfully."""
        deadline = time.monotonic() + timeout
        health: dict[str, str] = {}
        while time.monotonic() < deadline:
            health = self.active_targets()
            if sorted(health) == sorted(self.targets) and set(health.values()) == {"up"}:
                return
            time.sleep(0.2)
        raise TimeoutError(f"targets not up after {timeout}s: {health}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        return instant_query(self.url, expr)

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self._log.read_text(errors="replace").splitlines()[-lines:]) if self._log.exists() else ""

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=5)
        self._process = None
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PrometheusProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def instant_query(prometheus_url: str, expr: str) -> list[dict[str, Any]]:
    """Result vector (or scalar as one element) of ``expr`` now; raises ``PromQLError``."""
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = _get_json(url)
    if body.get("status") != "success":
        raise PromQLError(f"{expr!r}: {body.get('errorType')}: {body.get('error')}")
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return [{"value": data["result"]}]
    return list(data["result"])


@dataclass(frozen=True)
class PanelQuery:
    """One target expression of one panel, with its template variables substituted."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} [{self.ref_id}]: {self.expr}"


def _walk_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def _promql_regex_literal(value: str) -> str:
    """``value`` as an exact RE2 match inside a double-quoted PromQL string."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", value)


def variable_values(dashboard: dict[str, Any], job: str | None) -> dict[str, str]:
    """Value of every template variable: the job (exact) or ``.+``; built-in intervals."""
    values = dict(BUILTIN_INTERVALS)
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "datasource":
            continue
        name = variable["name"]
        values[name] = _promql_regex_literal(job) if name == "job" and job else ".+"
    return values


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace ``$var``, ``${var}``, ``${var:format}`` and ``[[var]]`` with ``values``."""
    def replace(match: re.Match[str]) -> str:
        name = match.group("braced") or match.group("plain") or match.group("bracket")
        if name not in values:
            raise KeyError(f"unknown template variable ${name} in {expr!r}")
        return values[name]

    pattern = r"\$\{(?P<braced>\w+)(?::\w+)?\}|\$(?P<plain>\w+)|\[\[(?P<bracket>\w+)\]\]"
    return re.sub(pattern, replace, expr)


def dashboard_queries(dashboards_dir: Path | str, job: str | None = None) -> list[PanelQuery]:
    queries = []
    for path in sorted(Path(dashboards_dir).glob("*.json")):
        dashboard = json.loads(path.read_text())
        values = variable_values(dashboard, job)
        for panel in _walk_panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append(PanelQuery(dashboard["title"], panel.get("title", ""),
                                              target.get("refId", ""), substitute(target["expr"], values)))
    return queries


def metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:tidemark|process)_\w+)", expr))
    return {re.sub(r"_bucket$", "", name) for name in names}


def empty_panel_queries(prometheus_url: str, dashboards_dir: Path | str, job: str | None = None) -> list[PanelQuery]:
    return [q for q in dashboard_queries(dashboards_dir, job) if not instant_query(prometheus_url, q.expr)]


def _unexpected_panel_results(prometheus_url: str, dashboards_dir: Path | str, job: str | None,
                              expect_empty: Callable[[PanelQuery], bool]) -> tuple[list[PanelQuery], list[PanelQuery]]:
    """(queries without data that should have some, queries with data that should have none)."""
    empty, filled = [], []
    for query in dashboard_queries(dashboards_dir, job):
        has_data = bool(instant_query(prometheus_url, query.expr))
        if expect_empty(query):
            if has_data:
                filled.append(query)
        elif not has_data:
            empty.append(query)
    return empty, filled


def assert_every_panel_has_data(prometheus_url: str, dashboards_dir: Path | str, job: str | None,
                                timeout: float = 15.0,
                                expect_empty: Callable[[PanelQuery], bool] | None = None) -> None:
    """Fail naming every panel query that still returns no data after ``timeout`` seconds, and
    every query ``expect_empty`` accepts that returns data."""
    expect = expect_empty or (lambda query: False)
    deadline = time.monotonic() + timeout
    empty, filled = _unexpected_panel_results(prometheus_url, dashboards_dir, job, expect)
    while (empty or filled) and time.monotonic() < deadline:
        time.sleep(1.0)
        empty, filled = _unexpected_panel_results(prometheus_url, dashboards_dir, job, expect)
    problems = []
    if empty:
        listing = "\n  ".join(str(q) for q in empty)
        problems.append(f"{len(empty)} dashboard queries return no data:\n  {listing}")
    if filled:
        listing = "\n  ".join(str(q) for q in filled)
        problems.append(f"{len(filled)} dashboard queries return data but should return none:\n  {listing}")
    if problems:
        raise AssertionError("\n".join(problems))
