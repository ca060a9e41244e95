"""The materializer's Prometheus metrics (names are the contract in docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)

MATERIALIZATIONS = Counter("tidemark_materializations_total",
                           "Materializations that ended, by outcome", ["job", "outcome"])
DURATION = Histogram("tidemark_materialization_duration_seconds",
                     "Duration of completed materializations (fold, snapshot, checks)", ["job"],
                     buckets=_SECONDS)
UPLOAD = Histogram("tidemark_materialization_upload_seconds",
                   "Time writing materialized snapshots to checkpoint storage", ["job"], buckets=_SECONDS)
LAST_SIZE = Gauge("tidemark_materialization_last_size_bytes",
                  "Full size of the last materialized snapshot", ["job"])
LAST_INCREMENTAL_SIZE = Gauge("tidemark_materialization_last_incremental_size_bytes",
                              "Bytes newly written by the last materialization (files not reused)", ["job"])

OUTCOMES = ("completed", "failed")


def declare(job: str) -> None:
    """Create a job's series at 0, so panels show 0 instead of no data."""
    for outcome in OUTCOMES:
        MATERIALIZATIONS.labels(job, outcome)
    LAST_SIZE.labels(job)
    LAST_INCREMENTAL_SIZE.labels(job)
