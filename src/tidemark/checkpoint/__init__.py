"""Checkpoint coordination as pure logic: options, pending and completed checkpoints, the
coordinator (records and clock in, commands out), statistics and restore planning."""

from tidemark.checkpoint.effects import (
    Command,
    EmitAborted,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    FailJob,
    PersistCheckpoint,
)
from tidemark.checkpoint.completed import CompletedCheckpoint
from tidemark.checkpoint.coordinator import AckResult, CheckpointCoordinator
from tidemark.checkpoint.job_state import AttemptOutcome, JobState, JobStatus, job_status
from tidemark.checkpoint.coordinator_ledger import CheckpointLedger, CoordinatorRecord
from tidemark.checkpoint.operator_state_mode import (
    OperatorStateMode,
    operator_state_file_name,
    operator_state_mode,
)
from tidemark.checkpoint.options import CheckpointingOptions
from tidemark.checkpoint.outcomes import AbortReason, AckOutcome
from tidemark.checkpoint.pending import PendingCheckpoint
from tidemark.checkpoint.restore_request import NewerCheckpointCompleted, RestoreRequest
from tidemark.checkpoint.restore_planner import (
    RestorePlan,
    SubtaskRestore,
    plan_assignments,
    plan_restore,
)
from tidemark.checkpoint.stats import (
    CheckpointCounts,
    CheckpointStatsEntry,
    CheckpointStatsSnapshot,
    CheckpointStatsTracker,
    CheckpointStatus,
)

__all__ = [
    "AbortReason",
    "AckOutcome",
    "AckResult",
    "AttemptOutcome",
    "CheckpointCoordinator",
    "CheckpointCounts",
    "CheckpointLedger",
    "CheckpointStatsEntry",
    "CheckpointStatsSnapshot",
    "CheckpointStatsTracker",
    "CheckpointStatus",
    "CheckpointingOptions",
    "Command",
    "CompletedCheckpoint",
    "CoordinatorRecord",
    "EmitAborted",
    "EmitCompleted",
    "EmitRestore",
    "EmitTrigger",
    "FailJob",
    "JobState",
    "JobStatus",
    "NewerCheckpointCompleted",
    "OperatorStateMode",
    "PendingCheckpoint",
    "PersistCheckpoint",
    "RestorePlan",
    "RestoreRequest",
    "SubtaskRestore",
    "operator_state_file_name",
    "job_status",
    "operator_state_mode",
    "plan_assignments",
    "plan_restore",
]
