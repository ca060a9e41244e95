"""The one HTTP server of the supervisor and of each stage worker: probes and metrics on one port,
and the supervisor's (or a worker host's) list of the worker processes to scrape."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx2
import pytest

from tidemark.processes import free_port
from tidemark.runtime.job.attempt import Assignment, Attempt
from tidemark.runtime.job.health import request_host, serve_health
from tidemark.runtime.job.metrics import RESTARTS
from tidemark.runtime.placement.local_workers import LocalWorkers
from tidemark.runtime.placement.pool import Launch
from tidemark.types import Epoch


def test_probes_and_metrics_on_one_port() -> None:
    state = {"ready": False}
    port = free_port()
    server = serve_health("127.0.0.1", port, lambda: state["ready"])
    try:
        url = f"http://127.0.0.1:{port}"
        assert (httpx2.get(url + "/livez", timeout=5).status_code) == 200
        assert httpx2.get(url + "/readyz", timeout=5).status_code == 503
        state["ready"] = True
        assert httpx2.get(url + "/readyz?verbose", timeout=5).text == "ready\n"
        RESTARTS.labels("health-test-job").inc()
        metrics = httpx2.get(url + "/metrics", timeout=5)
        assert metrics.headers["Content-Type"].startswith("text/plain; version=")
        assert 'tidemark_job_restarts_total{job="health-test-job"} 1.0' in metrics.text
        assert httpx2.get(url + "/", timeout=5).status_code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_targets_lists_the_worker_processes_that_run_for_prometheus_service_discovery() -> None:
    """``/targets`` (Prometheus ``http_sd_configs``): one group per running worker process, at the
    host the request named, ordered by port; nothing while none runs; 404 where there is no list."""
    running: dict[str, int] = {"map.w1": 9407, "map.w0": 9406, "source": 9405}
    port = free_port()
    server = serve_health("127.0.0.1", port, lambda: True, targets=lambda: dict(running))
    bare = serve_health("127.0.0.1", free_port(), lambda: True)
    try:
        url = f"http://127.0.0.1:{port}/targets"
        response = httpx2.get(url, timeout=5)
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == [
            {"targets": ["127.0.0.1:9405"], "labels": {"__meta_tidemark_process": "source"}},
            {"targets": ["127.0.0.1:9406"], "labels": {"__meta_tidemark_process": "map.w0"}},
            {"targets": ["127.0.0.1:9407"], "labels": {"__meta_tidemark_process": "map.w1"}},
        ]
        named = httpx2.get(url, headers={"Host": "worker:9404"}, timeout=5).json()
        assert [group["targets"] for group in named] == [["worker:9405"], ["worker:9406"], ["worker:9407"]]
        running.clear()  # between attempts, or the job ended
        assert httpx2.get(url, timeout=5).json() == []
        assert httpx2.get(f"http://127.0.0.1:{bare.server_address[1]}/targets", timeout=5).status_code == 404
    finally:
        for s in (server, bare):
            s.shutdown()
            s.server_close()


@pytest.mark.parametrize("header, host", [("worker:9404", "worker"), ("worker", "worker"),
                                          ("10.0.0.7:9404", "10.0.0.7"), ("[::1]:9404", "[::1]"),
                                          ("[fe80::1]", "[fe80::1]"), (None, socket.gethostname())])
def test_request_host(header: str | None, host: str) -> None:
    assert request_host(header) == host


class _Process:
    def __init__(self, returncode: int | None) -> None:
        self.returncode = returncode


def _launch(name: str, port: int | None) -> Launch:
    attempt = Attempt("pkg.job:job", name, Epoch(3), 2, Path("/tmp/run"))
    return Launch(name, Assignment(attempt, None, port))


def test_local_workers_list_the_metrics_ports_of_their_processes_that_have_not_exited(tmp_path: Path) -> None:
    workers = LocalWorkers(tmp_path)
    assert workers.metrics_ports() == {}
    workers._launched = {  # as ``launch`` leaves them, with the exit statuses ``states`` polled
        "source": (_launch("source", 9405), _Process(None)),
        "map": (_launch("map", 9406), _Process(-9)),  # died: its port is not served any more
        "sink": (_launch("sink", None), _Process(None)),  # no fixed port (no TIDEMARK_HTTP_PORT)
    }  # type: ignore[assignment]
    assert workers.metrics_ports() == {"source": 9405}
