"""Checkpoint statistics: counts by outcome, last completed figures, per-task timings, history."""

from __future__ import annotations

import pytest
from checkpoint_support import JOB, ack_all, decline, registration

from tidemark.checkpoint import (
    CheckpointCoordinator,
    CheckpointingOptions,
    CheckpointStatsTracker,
    CheckpointStatus,
    RestoreRequest,
)
from tidemark.protocol.messages import TaskTimings
from tidemark.types import CheckpointId, CheckpointType, TaskId


def test_coordinator_feeds_counts_sizes_durations_and_timings() -> None:
    coord = CheckpointCoordinator(JOB, CheckpointingOptions(interval_ms=100, tolerable_failures=5))
    reg = registration()
    coord.apply(reg, 0)
    coord.tick(100)
    (persist,) = ack_all(coord, reg, 1, 130)
    coord.apply(persist.metadata, 145)
    coord.tick(200)
    coord.apply(decline(2, reg.tasks[0], 210), 210)
    coord.tick(300)
    stats = coord.stats()
    assert stats.counts.triggered == 3
    assert (stats.counts.completed, stats.counts.failed, stats.counts.in_progress) == (1, 1, 1)
    assert stats.last_completed_id == 1
    assert stats.last_duration_ms == 45
    assert stats.last_checkpointed_size_bytes == 40 and stats.last_full_size_bytes == 400
    assert stats.last_completed_at == 145
    assert stats.time_since_last_completed_ms(245) == 100
    entry = stats.history[0]
    assert entry.status is CheckpointStatus.COMPLETED and entry.num_acknowledged == 4
    assert entry.metadata_path == "job/chk-1/_metadata"
    assert dict(entry.task_timings)[reg.tasks[0].task_id] == TaskTimings(1, 2, 3, 4)
    assert stats.last_failed is not None and "disk full" in (stats.last_failed.failure_reason or "")
    assert [e.status for e in stats.history] == [
        CheckpointStatus.COMPLETED, CheckpointStatus.FAILED, CheckpointStatus.IN_PROGRESS
    ]
    coord.request_restore(RestoreRequest("r", persist.metadata, persist.metadata_path, 2, 400), 400)
    stats = coord.stats()
    assert (stats.last_restore_at, stats.last_restored_checkpoint_id, stats.counts.restored) == (400, 1, 1)
    assert stats.counts.in_progress == 0 and stats.counts.failed == 2  # chk 3 superseded


def test_history_is_bounded_and_in_progress_stays_right_after_eviction() -> None:
    tracker = CheckpointStatsTracker(history_size=3)
    for i in range(1, 6):
        tracker.report_triggered(CheckpointId(i), CheckpointType.CHECKPOINT, i * 10, 2)
    snapshot = tracker.snapshot()
    assert [e.checkpoint_id for e in snapshot.history] == [3, 4, 5]
    assert snapshot.counts.in_progress == 5
    tracker.report_failed(CheckpointId(1), CheckpointType.CHECKPOINT, 10, 99, "TIMEOUT")
    tracker.report_task_ack(CheckpointId(5), TaskId("a#0"), TaskTimings(alignment_ms=7))
    snapshot = tracker.snapshot()
    assert snapshot.counts.in_progress == 4 and snapshot.counts.failed == 1
    assert [e.checkpoint_id for e in snapshot.history] == [3, 4, 5]
    assert snapshot.history[-1].num_acknowledged == 1
    assert snapshot.last_completed is None and snapshot.last_duration_ms is None
    with pytest.raises(ValueError):
        CheckpointStatsTracker(history_size=0)


def test_the_last_savepoint_is_kept_after_it_leaves_the_history() -> None:
    from tidemark.protocol.messages import CheckpointMetadata
    from tidemark.types import JobId

    tracker = CheckpointStatsTracker(history_size=2)

    def complete(cid: int, kind: CheckpointType) -> None:
        tracker.report_triggered(CheckpointId(cid), kind, cid * 10, 1)
        metadata = CheckpointMetadata(JobId("job"), CheckpointId(cid), kind, cid * 10, cid * 10 + 5, 8, ())
        tracker.report_completed(metadata, cid * 10 + 5, f"job/x-{cid}/_metadata")

    assert tracker.snapshot().last_savepoint is None
    complete(1, CheckpointType.CHECKPOINT)
    complete(2, CheckpointType.SAVEPOINT)
    for cid in range(3, 6):
        complete(cid, CheckpointType.CHECKPOINT)
    snapshot = tracker.snapshot()
    assert snapshot.last_savepoint is not None and 2 not in [e.checkpoint_id for e in snapshot.history]
    assert (snapshot.last_savepoint.checkpoint_id, snapshot.last_savepoint.ended_at,
            snapshot.last_savepoint.metadata_path) == (2, 25, "job/x-2/_metadata")
    complete(6, CheckpointType.STOP_WITH_SAVEPOINT)
    assert tracker.snapshot().last_savepoint.checkpoint_id == 6
    tracker.report_discarded(CheckpointId(5))  # another one: the last savepoint stays
    assert tracker.snapshot().last_savepoint.checkpoint_id == 6
    tracker.report_discarded(CheckpointId(6))  # discarded by an operator: no longer shown
    assert tracker.snapshot().last_savepoint is None
