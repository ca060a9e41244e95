"""Periodic savepoints and their retained history (the Flink Kubernetes Operator's
``job.savepointTriggerPeriod`` and ``savepointHistoryMaxCount``), as pure decisions.

Lifecycle: the coordinator's edge asks, for each job on each pass, whether a periodic savepoint is
due (:func:`periodic_savepoint_due`), and after a savepoint completed which savepoints leave the
history (:func:`savepoints_to_dispose`). Neither reads a clock or storage: the caller passes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.types import CheckpointId


@dataclass(frozen=True, slots=True)
class SavepointPolicy:
    """``interval_ms``: a savepoint of every running job this often (0: none); ``retained``: how
    many of a job's newest savepoints to keep, the older ones disposed (0: keep every one)."""

    interval_ms: int = 0
    retained: int = 0

    def __post_init__(self) -> None:
        if self.interval_ms < 0 or self.retained < 0:
            raise ValueError(f"interval_ms and retained must be >= 0, got {self.interval_ms}, {self.retained}")

    @property
    def periodic(self) -> bool:
        return self.interval_ms > 0


def periodic_savepoint_due(policy: SavepointPolicy, *, running: bool, request_open: bool,
                           since_ms: int | None, now_ms: int) -> bool:
    """A periodic savepoint of a job is due: the policy takes them, the job runs (not stopping or
    finished), its previous periodic request has ended (one at a time, never a queue), and an
    interval has passed ``since_ms``: the newer of its last savepoint and its last periodic request,
    or when it was first seen running (a job is never saved the moment it starts)."""
    if not policy.periodic or not running or request_open or since_ms is None:
        return False
    return now_ms - since_ms >= policy.interval_ms


def savepoints_to_dispose(policy: SavepointPolicy, retained_ids: Iterable[CheckpointId]) -> tuple[CheckpointId, ...]:
    """The savepoints beyond the retained count, oldest first; never the newest one."""
    if policy.retained <= 0:
        return ()
    ordered = sorted(set(retained_ids))
    return tuple(ordered[: max(len(ordered) - policy.retained, 0)])
