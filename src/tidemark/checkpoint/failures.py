"""Counting consecutive checkpoint failures (Flink: CheckpointFailureManager).

Lifecycle: one per coordinator; ``on_aborted`` for every aborted checkpoint or savepoint,
``on_completed`` for every completed one, ``reset`` when a new attempt starts (a registration
of a newer epoch, or a restore). Savepoints and aborts that are not the job's fault (superseded,
finished) never count. Once ``exceeded``, the coordinator fails the attempt over (see
:meth:`CheckpointCoordinator._fail_attempt_if_intolerable`).
"""

from __future__ import annotations

from tidemark.checkpoint.outcomes import AbortReason
from tidemark.types import CheckpointType


class CheckpointFailureManager:
    """Tells when more consecutive counted failures happened than ``tolerable_failures``."""

    __slots__ = ("tolerable_failures", "_consecutive")

    def __init__(self, tolerable_failures: int) -> None:
        self.tolerable_failures = tolerable_failures
        self._consecutive = 0

    @property
    def consecutive_failures(self) -> int:
        return self._consecutive

    @property
    def exceeded(self) -> bool:
        return self._consecutive > self.tolerable_failures

    def on_aborted(self, checkpoint_type: CheckpointType, reason: AbortReason) -> None:
        if checkpoint_type.is_savepoint or not reason.counts_as_failure:
            return
        self._consecutive += 1

    def on_completed(self, checkpoint_type: CheckpointType) -> None:
        if not checkpoint_type.is_savepoint:
            self._consecutive = 0

    def reset(self) -> None:
        self._consecutive = 0
