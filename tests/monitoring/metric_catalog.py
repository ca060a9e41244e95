"""The metrics contract, read from the metrics reference table of docs/operations.md.

``load_catalog()`` returns one ``CatalogMetric`` per table row (name, type, labels, exporter);
it raises ``ValueError`` when the table is missing, a row is malformed or names an exporter not in
``EXPORTERS``, so the document stays machine-readable.

Exporters: ``all`` (every service and the stage workers), one service, ``worker`` (each stage
worker process of a job) or ``supervisor`` (the job's ``tidemark jobs run`` process: the
``tidemark_job_*`` metrics, on the port stage workers count from).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
TYPES = {"counter", "gauge", "histogram"}
EXPORTERS = {"all", "coordinator", "checkpoint-store", "changelog", "materializer", "worker", "supervisor"}
ROW = re.compile(r"^\| `(?P<name>tidemark_\w+)` \| (?P<type>\w+) \| (?P<labels>[^|]*)\| (?P<by>[^|]+)\|")


@dataclass(frozen=True)
class CatalogMetric:
    name: str
    type: str
    labels: tuple[str, ...]
    exported_by: str

    def as_exporter_entry(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "labels": list(self.labels)}

    @property
    def series_names(self) -> set[str]:
        if self.type == "histogram":
            return {f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        return {self.name}


def load_catalog(path: Path = OPERATIONS_DOC) -> list[CatalogMetric]:
    section = path.read_text().split("## Metrics reference", 1)
    if len(section) != 2:
        raise ValueError(f"{path} has no '## Metrics reference' section")
    metrics = []
    for line in section[1].split("\n## ", 1)[0].splitlines():
        if not line.startswith("| `tidemark_"):
            continue
        match = ROW.match(line)
        if match is None or match["type"] not in TYPES:
            raise ValueError(f"malformed metrics row: {line}")
        labels = tuple(re.findall(r"`(\w+)`", match["labels"]))
        exported_by = match["by"].strip()
        if exported_by not in EXPORTERS:
            raise ValueError(f"unknown exporter {exported_by!r} in metrics row: {line}")
        metrics.append(CatalogMetric(match["name"], match["type"], labels, exported_by))
    if not metrics:
        raise ValueError(f"{path}: the metrics table is empty")
    return metrics
