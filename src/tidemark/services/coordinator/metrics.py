"""The coordinator's Prometheus metrics: what Flink's CheckpointStatsTracker exposes.

The checkpoint age (``tidemark_checkpoint_seconds_since_last_completed``) is exported only while
the job is meant to run (:func:`tidemark.checkpoint.job_state.meant_to_run`: ``CREATED``,
``RUNNING``, ``RESTARTING``): a job that ended (stopped with a savepoint, cancelled, failed, or in
any other state that is not one of those) has no checkpoint due, so its series is removed, and
neither a dashboard nor ``TidemarkNoRecentCheckpoint`` sees an age that only grows. A job that
runs again counts its age from when it did, unless a checkpoint completed since.
"""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

from tidemark.checkpoint.job_state import JobState, meant_to_run
from tidemark.checkpoint.stats import CheckpointCounts, CheckpointStatsSnapshot

TRIGGERED = Counter("tidemark_checkpoints_triggered_total", "Checkpoints and savepoints triggered", ["job"])
OUTCOMES = Counter("tidemark_checkpoints_total", "Checkpoints that ended, by outcome", ["job", "outcome"])
IN_PROGRESS = Gauge("tidemark_checkpoints_in_progress", "Checkpoints collecting acks or completing", ["job"])
LAST_DURATION = Gauge("tidemark_checkpoint_last_duration_seconds", "Duration of the last completed checkpoint", ["job"])
DURATION = Histogram("tidemark_checkpoint_duration_seconds", "Duration of completed checkpoints", ["job"],
                     buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
TIMEOUT = Gauge("tidemark_checkpoint_timeout_seconds", "Configured checkpoint timeout", ["job"])
LAST_SIZE = Gauge("tidemark_checkpoint_last_size_bytes", "Bytes written by the last completed checkpoint", ["job"])
LAST_FULL_SIZE = Gauge("tidemark_checkpoint_last_full_size_bytes", "Full state size of the last completed checkpoint", ["job"])
LAST_ID = Gauge("tidemark_checkpoint_last_completed_id", "Id of the last completed checkpoint", ["job"])
LAST_AT = Gauge("tidemark_checkpoint_last_completed_timestamp_seconds", "When the last checkpoint completed", ["job"])
SINCE_LAST = Gauge("tidemark_checkpoint_seconds_since_last_completed", "Time since the last completed checkpoint "
                   "(exported while the job is meant to run: CREATED, RUNNING or RESTARTING)", ["job"])
LAST_RESTORE = Gauge("tidemark_checkpoint_last_restore_timestamp_seconds", "When the job was last restored", ["job"])
RESTORES = Counter("tidemark_restores_total", "Restore commands issued", ["job"])
SAVEPOINTS = Counter("tidemark_savepoints_total", "Savepoints that ended, by outcome", ["job", "outcome"])
JOB_FAILURES = Counter("tidemark_job_failures_total", "Job attempts failed for too many checkpoint failures", ["job"])
ATTEMPT_FAILED = Gauge("tidemark_checkpoint_failover_in_progress", "1 while the job's attempt has failed over for too many "
                       "checkpoint failures and no new attempt has registered (the job makes no progress)", ["job"])


class CoordinatorMetrics:
    """Turns one job's stats snapshots into metrics (counters advance by the snapshots' deltas)."""

    def __init__(self, job: str, timeout_ms: int) -> None:
        self.job = job
        self._last_seen_completed: int | None = None
        TIMEOUT.labels(job).set(timeout_ms / 1000)
        for outcome in ("completed", "failed"):
            OUTCOMES.labels(job, outcome)
            SAVEPOINTS.labels(job, outcome)
        TRIGGERED.labels(job)
        RESTORES.labels(job)
        JOB_FAILURES.labels(job)
        ATTEMPT_FAILED.labels(job).set(0)
        self._last_completed_at: float | None = None
        self._counts = CheckpointCounts()
        self._age_exported = False  # the age series is exported (the job is meant to run)
        self._ended = False  # the job has been seen in a state it is not meant to run in
        self._running_again_at: float | None = None  # when it was meant to run again after that

    def _since_last(self) -> float:
        """Seconds since the last completed checkpoint, or since the job runs again after it
        ended, whichever is later; 0 until a checkpoint completes."""
        if self._last_completed_at is None:
            return 0.0
        since = max(self._last_completed_at, self._running_again_at or 0.0)
        return max(0.0, time.time() - since)

    def update_state(self, state: JobState, attempt_failed: bool) -> None:
        """The job's state (:attr:`CheckpointCoordinator.status`) after each change and each tick:
        the age series is exported while the job is meant to run and removed while it is not."""
        ATTEMPT_FAILED.labels(self.job).set(1 if attempt_failed else 0)
        if meant_to_run(state):
            if not self._age_exported:
                if self._ended:  # started again: no checkpoint was due while it was not running
                    self._running_again_at = time.time()
                SINCE_LAST.labels(self.job).set_function(self._since_last)
                self._age_exported = True
        else:
            self._ended = True
            if self._age_exported:
                SINCE_LAST.remove(self.job)
                self._age_exported = False

    def update(self, stats: CheckpointStatsSnapshot) -> None:
        job, counts, seen = self.job, stats.counts, self._counts
        TRIGGERED.labels(job).inc(max(0, counts.triggered - seen.triggered))
        OUTCOMES.labels(job, "completed").inc(max(0, counts.completed - seen.completed))
        OUTCOMES.labels(job, "failed").inc(max(0, counts.failed - seen.failed))
        RESTORES.labels(job).inc(max(0, counts.restored - seen.restored))
        self._counts = counts
        IN_PROGRESS.labels(job).set(counts.in_progress)
        if stats.last_restore_at is not None:
            LAST_RESTORE.labels(job).set(stats.last_restore_at / 1000)
        last = stats.last_completed
        if last is None:
            return
        self._last_completed_at = (stats.last_completed_at or 0) / 1000
        LAST_ID.labels(job).set(last.checkpoint_id)
        LAST_AT.labels(job).set(self._last_completed_at)
        LAST_DURATION.labels(job).set((last.duration_ms or 0) / 1000)
        LAST_SIZE.labels(job).set(last.checkpointed_size_bytes or 0)
        LAST_FULL_SIZE.labels(job).set(last.state_size_bytes or 0)
        if last.checkpoint_id != self._last_seen_completed:
            self._last_seen_completed = last.checkpoint_id
            DURATION.labels(job).observe((last.duration_ms or 0) / 1000)
