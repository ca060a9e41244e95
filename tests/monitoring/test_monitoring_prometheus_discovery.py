"""docker-compose's Prometheus scrapes the job's worker processes that run, and only those: a real
Prometheus with the tidemark scrape job of deploy/prometheus/prometheus.yml (addresses moved to
this machine, intervals shortened) against a supervisor's HTTP server whose ``/targets`` lists
the worker processes running now. Nothing the list leaves out is scraped, so no target is down
for a port nobody serves (``TidemarkTargetDown``)."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from prom_harness import MissingBinary, PrometheusProcess, free_port, require_binary

from tidemark.runtime.job.health import serve_health

COMPOSE_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "prometheus.yml"


def _compose_config_here(supervisor: str) -> str:
    """The compose config's tidemark scrape job with the supervisor at ``supervisor`` (its only
    static target here: no service runs), scraping and asking for targets every second."""
    config = yaml.safe_load(COMPOSE_CONFIG.read_text())
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "tidemark"]
    (discovery,) = job["http_sd_configs"]
    url = urllib.parse.urlsplit(discovery["url"])
    assert url.netloc == "worker:9404" and "worker:9404" in job["static_configs"][0]["targets"]
    job["static_configs"] = [{"targets": [supervisor]}]
    job["http_sd_configs"] = [{**discovery, "url": url._replace(netloc=supervisor).geturl(), "refresh_interval": "1s"}]
    job["scrape_interval"] = job["scrape_timeout"] = "1s"
    return json.dumps({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [job]})


def _wait_until(prometheus: PrometheusProcess, expected: dict[str, str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    seen: dict[str, str] = {}
    while time.monotonic() < deadline:
        seen = prometheus.active_targets()
        if seen == expected:
            return
        time.sleep(0.2)
    raise AssertionError(f"targets {seen}, expected {expected}: {prometheus.log_tail()}")


@pytest.fixture
def servers() -> Iterator[Callable[..., ThreadingHTTPServer]]:
    started: list[ThreadingHTTPServer] = []

    def start(**kwargs: object) -> ThreadingHTTPServer:
        server = serve_health("127.0.0.1", free_port(), lambda: True, **kwargs)  # type: ignore[arg-type]
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_compose_prometheus_scrapes_the_worker_processes_the_supervisor_lists(
        tmp_path: Path, servers: Callable[..., ThreadingHTTPServer]) -> None:
    try:
        require_binary("prometheus")
    except MissingBinary as error:
        pytest.fail(str(error))
    source, sink = servers(), servers()  # two worker processes' metrics servers
    running = {"source": source.server_address[1], "sink": sink.server_address[1]}
    listed = dict(running)
    supervisor = f"127.0.0.1:{servers(targets=lambda: dict(listed)).server_address[1]}"
    processes = {name: f"127.0.0.1:{port}" for name, port in running.items()}
    with PrometheusProcess([], tmp_path, config=_compose_config_here(supervisor)) as prometheus:
        _wait_until(prometheus, {supervisor: "up", processes["source"]: "up", processes["sink"]: "up"})
        listed.pop("sink")  # its process exited: its port leaves the scrape, it is not "down"
        _wait_until(prometheus, {supervisor: "up", processes["source"]: "up"})
        listed.clear()  # the attempt ended (a failover, a stop): only the supervisor is scraped
        _wait_until(prometheus, {supervisor: "up"})
        listed.update(running)  # the next attempt
        _wait_until(prometheus, {supervisor: "up", processes["source"]: "up", processes["sink"]: "up"})
