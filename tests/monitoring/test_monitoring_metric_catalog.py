"""The metrics contract in docs/operations.md follows Prometheus conventions and covers Flink's checkpoint metrics."""

from __future__ import annotations

import re

from metric_catalog import load_catalog

BOUNDED_LABELS = {"job", "service", "version", "topic", "partition", "reason", "outcome", "mode", "operator", "task",
                  "stage", "domain", "action", "state"}  # state: the names a job's functions declare
UNIT_SUFFIXES = ("_seconds", "_bytes", "_records", "_total", "_info", "_id", "_files", "_checkpoints", "_savepoints",
                 "_timers", "_ready", "_in_progress", "_completed", "_epoch", "_running", "_entries")


def test_catalog_parses_and_names_are_unique() -> None:
    catalog = load_catalog()
    names = [m.name for m in catalog]
    assert len(names) == len(set(names)) >= 35


def test_counters_end_in_total_and_nothing_else_does() -> None:
    for metric in load_catalog():
        assert metric.name.endswith("_total") == (metric.type == "counter"), metric.name


def test_units_are_base_units() -> None:
    for metric in load_catalog():
        assert not re.search(r"_(milliseconds|ms|millis|minutes|kilobytes|kb|mb)(_|$)", metric.name), metric.name
        assert metric.name.endswith(UNIT_SUFFIXES), f"{metric.name} has no unit or kind suffix"
        if metric.type == "histogram":
            assert metric.name.endswith("_seconds"), metric.name


def test_only_the_watermark_gauges_depend_on_event_time_and_rocksdb_s_own_figures_on_rocksdb() -> None:
    """Timer and late-record series exist at 0 in every stage worker; the watermark gauges only
    from a stage's first watermark; the state gauges on every backend, RocksDB's figures on RocksDB."""
    conditional = {m.name: m.only_with for m in load_catalog() if m.only_with is not None}
    assert conditional == {"tidemark_worker_watermark_timestamp_seconds": "event time",
                           "tidemark_worker_watermark_lag_seconds": "event time",
                           **{f"tidemark_worker_rocksdb_{figure}_bytes": "the RocksDB backend"
                              for figure in ("live_sst", "memtable", "pending_compaction", "block_cache")}}


def test_label_sets_are_bounded() -> None:
    for metric in load_catalog():
        assert set(metric.labels) <= BOUNDED_LABELS, metric.name


def test_job_metrics_carry_the_job_label() -> None:
    for metric in load_catalog():
        if metric.exported_by in {"coordinator", "checkpoint-store", "materializer", "worker", "supervisor"}:
            assert "job" in metric.labels, metric.name
        if metric.exported_by == "all":
            assert "service" in metric.labels, metric.name


def test_flink_checkpoint_metrics_are_covered() -> None:
    """Every metric of Flink's CheckpointStatsTracker has a counterpart."""
    names = {m.name for m in load_catalog()}
    flink = {
        "numberOfCheckpoints": "tidemark_checkpoints_triggered_total",
        "numberOfCompletedCheckpoints": "tidemark_checkpoints_total",
        "numberOfFailedCheckpoints": "tidemark_checkpoints_total",
        "numberOfInProgressCheckpoints": "tidemark_checkpoints_in_progress",
        "lastCheckpointDuration": "tidemark_checkpoint_last_duration_seconds",
        "lastCheckpointSize": "tidemark_checkpoint_last_size_bytes",
        "lastCheckpointFullSize": "tidemark_checkpoint_last_full_size_bytes",
        "lastCompletedCheckpointId": "tidemark_checkpoint_last_completed_id",
        "lastCheckpointRestoreTimestamp": "tidemark_checkpoint_last_restore_timestamp_seconds",
        "checkpointAlignmentTime": "tidemark_worker_alignment_seconds",
        "checkpointStartDelayNanos / sync / async durations": "tidemark_worker_snapshot_async_seconds",
        "numRestarts (job)": "tidemark_job_restarts_total",
    }
    assert set(flink.values()) <= names
