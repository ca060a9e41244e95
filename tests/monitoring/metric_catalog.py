"""The metrics contract, read from the metrics reference table of docs/operations.md.

``load_catalog()`` returns one ``CatalogMetric`` per table row (name, type, labels, exporter,
condition); it raises ``ValueError`` when the table is missing, a row is malformed, names an
exporter not in ``EXPORTERS`` or a condition not in ``CONDITIONS``, so the document stays
machine-readable.

Exporters: ``all`` (every service and the stage workers), one service, ``worker`` (each stage
worker process of a job) or ``supervisor`` (the job's ``tidemark jobs run`` process: the
``tidemark_job_*`` metrics, on the port stage workers count from).

Conditions: a row whose meaning starts with ``*only with <condition>*`` is exported only by jobs
that meet the condition (``only_with``; None for every other row). ``event time``: a stage of
the job has ``event_time`` (the watermark gauges appear with a stage's first watermark); ``the
RocksDB backend``: the job's ``state_backend`` is ``rocksdb``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
TYPES = {"counter", "gauge", "histogram"}
EXPORTERS = {"all", "coordinator", "checkpoint-store", "changelog", "materializer", "worker", "supervisor"}
CONDITIONS = {"event time", "the RocksDB backend"}
ROW = re.compile(r"^\| `(?P<name>tidemark_\w+)` \| (?P<type>\w+) \| (?P<labels>[^|]*)\| (?P<by>[^|]+)\|")
ONLY_WITH = re.compile(r"^ *\*only with (?P<condition>[^*]+)\*")


@dataclass(frozen=True)
class CatalogMetric:
    name: str
    type: str
    labels: tuple[str, ...]
    exported_by: str
    only_with: str | None = None

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
        condition = ONLY_WITH.match(line[match.end():])
        only_with = condition["condition"] if condition else None
        if only_with is not None and only_with not in CONDITIONS:
            raise ValueError(f"unknown condition {only_with!r} in metrics row: {line}")
        metrics.append(CatalogMetric(match["name"], match["type"], labels, exported_by, only_with))
    if not metrics:
        raise ValueError(f"{path}: the metrics table is empty")
    return metrics
