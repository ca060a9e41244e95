"""A real Prometheus exporter process for the monitoring tests (prometheus_client).

Usage: python exporter_process.py PORT CATALOG_JSON JOB

Serves, on 127.0.0.1:PORT, every metric of CATALOG_JSON (a list of {"name", "type", "labels"},
type counter|gauge|histogram) with one child per label set: ``job`` is JOB, ``outcome`` and
``mode`` take each of their documented values, any other label takes a sample value. Every half
second counters grow, gauges change and histograms observe, so rates are non-zero. Runs until
terminated; prometheus_client's default process_* metrics are included.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, start_http_server

ENUMERATED = {"outcome": ["completed", "failed"], "mode": ["physical", "logical"]}
SAMPLE = {"service": "coordinator", "version": "0.1.0", "topic": "tidemark.acks", "reason": "malformed",
          "operator": "counter", "task": "0", "partition": "0"}


def _children(metric: Any, labels: list[str], job: str) -> list[Any]:
    if not labels:
        return [metric]
    choices = [ENUMERATED.get(l) or [job if l == "job" else SAMPLE.get(l, "x")] for l in labels]
    return [metric.labels(*combo) for combo in itertools.product(*choices)]


def build(catalog: list[dict[str, Any]], job: str) -> list[tuple[str, list[Any]]]:
    kinds = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
    built = []
    for entry in catalog:
        metric = kinds[entry["type"]](entry["name"], entry.get("help") or entry["name"], entry["labels"])
        built.append((entry["type"], _children(metric, entry["labels"], job)))
    return built


def tick(built: list[tuple[str, list[Any]]], step: int) -> None:
    for kind, children in built:
        for child in children:
            if kind == "counter":
                child.inc()
            elif kind == "gauge":
                child.set(1 + step % 5)
            else:
                child.observe(0.05 * (1 + step % 7))


def main() -> None:
    port, catalog_path, job = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    built = build(json.loads(catalog_path.read_text()), job)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    tick(built, 0)
    start_http_server(port, addr="127.0.0.1")
    for step in itertools.count(1):
        time.sleep(0.5)
        tick(built, step)


if __name__ == "__main__":
    main()
