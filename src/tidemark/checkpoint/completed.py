"""A fully acknowledged checkpoint (Flink: CompletedCheckpoint).

Lifecycle: produced by ``PendingCheckpoint.finalize``; handed to the checkpoint-store to be made
durable; ``confirmed`` once the store has written its ``_metadata`` (then the coordinator tells
everyone it completed). Immutable: each stage is a new value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tidemark.protocol.messages import CheckpointMetadata, TaskTimings
from tidemark.types import CheckpointId, CheckpointType, TaskId


@dataclass(frozen=True, slots=True)
class CompletedCheckpoint:
    """The metadata of a completed checkpoint plus the per-task timings its acks reported."""

    metadata: CheckpointMetadata
    timings: dict[TaskId, TaskTimings] = field(default_factory=dict, compare=False)
    durable: bool = False

    @property
    def checkpoint_id(self) -> CheckpointId:
        return self.metadata.checkpoint_id

    @property
    def checkpoint_type(self) -> CheckpointType:
        return self.metadata.checkpoint_type

    @property
    def is_savepoint(self) -> bool:
        return self.metadata.checkpoint_type.is_savepoint

    def confirmed(self, stored: CheckpointMetadata) -> CompletedCheckpoint:
        """This checkpoint once the store reports ``stored`` (authoritative metadata) durable."""
        if stored.checkpoint_id != self.checkpoint_id:
            raise ValueError(f"store confirmed {stored.checkpoint_id}, not {self.checkpoint_id}")
        return replace(self, metadata=stored, durable=True)
