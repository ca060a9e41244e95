"""Checkpointing options of one job (Flink: CheckpointConfig), validated at construction."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.types import CheckpointingMode

MIN_INTERVAL_MS = 10
"""Smallest allowed checkpoint interval (Flink's ``MINIMAL_CHECKPOINT_TIME``)."""


@dataclass(frozen=True, slots=True)
class CheckpointingOptions:
    """How often and how strictly the coordinator checkpoints a job.

    ``interval_ms``: time between periodic triggers. ``timeout_ms``: a checkpoint still collecting
    acks after this long is aborted. ``min_pause_ms``: minimum time between the completion of one
    checkpoint and the trigger of the next; a non-zero pause also means at most one checkpoint in
    flight. ``max_concurrent``: periodic checkpoints in flight at once (savepoints are not
    limited). ``tolerable_failures``: consecutive counted checkpoint failures tolerated; one more
    fails the job. ``mode``: barrier handling the triggers ask for.
    """

    interval_ms: int
    timeout_ms: int = 600_000
    min_pause_ms: int = 0
    max_concurrent: int = 1
    tolerable_failures: int = 0
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE

    def __post_init__(self) -> None:
        if self.interval_ms < MIN_INTERVAL_MS:
            raise ValueError(f"interval_ms must be >= {MIN_INTERVAL_MS}, got {self.interval_ms}")
        if self.timeout_ms < 1:
            raise ValueError(f"timeout_ms must be >= 1, got {self.timeout_ms}")
        if self.min_pause_ms < 0:
            raise ValueError(f"min_pause_ms must be >= 0, got {self.min_pause_ms}")
        if self.max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {self.max_concurrent}")
        if self.tolerable_failures < 0:
            raise ValueError(f"tolerable_failures must be >= 0, got {self.tolerable_failures}")
        if not isinstance(self.mode, CheckpointingMode):
            raise ValueError(f"mode must be a CheckpointingMode, got {self.mode!r}")

    @property
    def effective_max_concurrent(self) -> int:
        """A minimum pause serialises checkpoints, as in Flink."""
        return 1 if self.min_pause_ms > 0 else self.max_concurrent
