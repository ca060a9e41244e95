"""Inputs to the coordinator that do not come from a topic record."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.protocol.messages import CheckpointMetadata


@dataclass(frozen=True, slots=True)
class RestoreRequest:
    """Operator (CLI/HTTP) or failover -> coordinator: restart the job from ``metadata``.

    ``metadata`` is the completed checkpoint or savepoint read from ``metadata_path``;
    ``parallelism`` is the new parallelism of every operator. The coordinator answers with a
    ``RestoreCommand``, which is the record that makes the restore part of the log.
    """

    restore_id: str
    metadata: CheckpointMetadata
    metadata_path: str
    parallelism: int
    requested_at: int

    def __post_init__(self) -> None:
        if not self.restore_id:
            raise ValueError("restore_id must not be empty")
        if not 0 < self.parallelism <= self.metadata.max_parallelism:
            raise ValueError(
                f"parallelism must be in 1..{self.metadata.max_parallelism}, got {self.parallelism}"
            )
