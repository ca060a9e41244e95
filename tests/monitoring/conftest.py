"""Fixtures of the monitoring tests: real exporter processes and a real Prometheus.

``prometheus_factory(targets)`` starts a Prometheus scraping ``targets`` every second and waits
until they are up (Prometheus's service discovery takes about 5 s to hand over static targets,
so start one per module, not per test); ``exporter_factory(catalog, job)`` starts an exporter
process and returns its ``host:port``. Both are module-scoped and stop every process they
started when the module's tests end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from prom_harness import MissingBinary, PrometheusProcess, free_port, require_binary, wait_for_port

EXPORTER = Path(__file__).resolve().parent / "exporter_process.py"


@pytest.fixture(scope="module")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[list[str]], PrometheusProcess]]:
    try:
        require_binary("prometheus")
    except MissingBinary as error:
        pytest.fail(str(error))
    started: list[PrometheusProcess] = []

    def start(targets: list[str]) -> PrometheusProcess:
        workdir = tmp_path_factory.mktemp("prometheus")
        server = PrometheusProcess(targets, workdir)
        started.append(server)
        server.start()
        server.wait_for_targets_up()
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def exporter_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[list[dict[str, Any]], str], str]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(catalog: list[dict[str, Any]], job: str) -> str:
        port = free_port()
        catalog_file = tmp_path_factory.mktemp("exporter") / "catalog.json"
        catalog_file.write_text(json.dumps(catalog))
        process = subprocess.Popen([sys.executable, str(EXPORTER), str(port), str(catalog_file), job])
        processes.append(process)
        wait_for_port(port)
        return f"127.0.0.1:{port}"

    yield start
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
