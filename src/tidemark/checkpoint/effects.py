"""What the coordinator asks its edge to do: one frozen dataclass per kind of side effect.

The service carries each out: ``Emit*`` commands are written to the control topic,
``PersistCheckpoint`` goes to the checkpoint-store (which answers with the ``CheckpointMetadata``
event once ``_metadata`` is durable), ``FailJob`` writes ``AttemptFailed`` to the control topic,
on which the job's supervisor fails the job over.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointMetadata,
    AttemptFailed,
    CheckpointTrigger,
    RestoreCommand,
)
from tidemark.types import TaskId


@dataclass(frozen=True, slots=True)
class EmitTrigger:
    """Write ``trigger`` to the control topic; ``source_tasks`` inject the barriers."""

    trigger: CheckpointTrigger
    source_tasks: tuple[TaskId, ...]


@dataclass(frozen=True, slots=True)
class PersistCheckpoint:
    """Make ``metadata`` durable at ``metadata_path``; idempotent per checkpoint id."""

    metadata: CheckpointMetadata
    metadata_path: str


@dataclass(frozen=True, slots=True)
class EmitCompleted:
    """Write ``completed`` to the control topic; only now may sinks commit."""

    completed: CheckpointCompleted


@dataclass(frozen=True, slots=True)
class EmitAborted:
    """Write ``aborted`` to the control topic; sinks abort the checkpoint's transactions."""

    aborted: CheckpointAborted


@dataclass(frozen=True, slots=True)
class EmitRestore:
    """Write ``restore`` to the control topic; workers restart at the new epoch from it."""

    restore: RestoreCommand


@dataclass(frozen=True, slots=True)
class FailJob:
    """More consecutive checkpoint failures than tolerated: write ``failed`` to the control
    topic; the attempt's supervisor fails the job over (Flink: a global failover restoring the
    newest completed checkpoint, counted as a restart)."""

    failed: AttemptFailed


Command = EmitTrigger | PersistCheckpoint | EmitCompleted | EmitAborted | EmitRestore | FailJob
"""Every command the coordinator can return."""
