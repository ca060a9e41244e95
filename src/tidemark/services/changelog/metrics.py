"""The changelog service's Prometheus metrics (names are the contract in docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

PENDING_BYTES = Gauge("tidemark_changelog_pending_bytes",
                      "Changelog bytes not yet covered by a materialization", ["job", "operator"])
TRUNCATED_RECORDS = Counter("tidemark_changelog_truncated_records_total",
                            "Changelog records released by truncation", ["job", "operator"])
TRUNCATED_BYTES = Counter("tidemark_changelog_truncated_bytes_total",
                          "Changelog bytes released by truncation", ["job", "operator"])
TRUNCATIONS = Counter("tidemark_changelog_truncations_total",
                      "Changelog partition truncations, physical (DeleteRecords) or logical", ["job", "mode"])
DELETE_RECORDS_UNSUPPORTED = Counter("tidemark_changelog_delete_records_unsupported_total",
                                     "DeleteRecords requests the broker refused as unsupported")

MODES = ("physical", "logical")


def declare(job: str, operator: str | None = None) -> None:
    """Create a job's (and a topic's) series at 0, so panels show 0 instead of no data."""
    for mode in MODES:
        TRUNCATIONS.labels(job, mode)
    if operator is not None:
        PENDING_BYTES.labels(job, operator)
        TRUNCATED_RECORDS.labels(job, operator)
        TRUNCATED_BYTES.labels(job, operator)
