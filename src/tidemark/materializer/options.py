"""Options of periodic materialization (frozen; the service builds them from its settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MaterializationOptions:
    """``interval_ms``: least time between two materializations of one task; each task adds a
    random delay in ``[0, jitter_ms)`` every time, so tasks do not all upload at once.
    ``failure_budget``: consecutive failures of one task retried at the normal pace; after that
    the task backs off exponentially, up to ``max_backoff_ms``, until a materialization succeeds.
    """

    interval_ms: int = 60_000
    jitter_ms: int = 10_000
    failure_budget: int = 3
    max_backoff_ms: int = 600_000

    def __post_init__(self) -> None:
        if self.interval_ms < 1 or self.jitter_ms < 0 or self.failure_budget < 1:
            raise ValueError(f"invalid materialization options: {self}")
        if self.max_backoff_ms < self.interval_ms:
            raise ValueError(f"max_backoff_ms must be >= interval_ms: {self}")
