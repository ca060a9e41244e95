"""The one HTTP server of the supervisor and of each stage worker: probes and metrics on one port."""

from __future__ import annotations

import httpx2

from tidemark.processes import free_port
from tidemark.runtime.job.health import serve_health
from tidemark.runtime.job.metrics import RESTARTS


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
