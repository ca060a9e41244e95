"""The materializer's library: which task checkpoints to materialize and when, task replicas
folded from the changelog, and materialized snapshots written as shared files.

See ``docs/concepts/changelog.md``; the service wiring is :mod:`tidemark.services.materializer`.
"""

from tidemark.materializer.materializer_ledger import MaterializerLedger, TaskCheckpoint, TaskKey
from tidemark.materializer.materialization import (
    MaterializationError,
    MaterializationOutcome,
    failure_event,
    materialize,
)
from tidemark.materializer.options import MaterializationOptions
from tidemark.materializer.replica_planning import Current, Extend, Rebuild, ReplicaLineage, plan_fold
from tidemark.materializer.replica import TaskReplica
from tidemark.materializer.schedule import MaterializationSchedule
from tidemark.materializer.storage import SharedFilesView, materialization_prefix

__all__ = [
    "Current",
    "Extend",
    "MaterializationError",
    "MaterializationOptions",
    "MaterializationOutcome",
    "MaterializationSchedule",
    "MaterializerLedger",
    "Rebuild",
    "ReplicaLineage",
    "SharedFilesView",
    "TaskCheckpoint",
    "TaskKey",
    "TaskReplica",
    "failure_event",
    "materialization_prefix",
    "materialize",
    "plan_fold",
]
