"""The checkpoint or savepoint a state-processor command names, and its stages.

``open_source(storage, job, checkpoint_id=..., path=...)`` resolves the ``_metadata`` through the
checkpoint-store catalog (the same lookup a restore request makes) and returns a
:class:`StateSource`; every problem an operator can cause (no such job, id or path, another
job's metadata, an unreadable file, an unknown stage) is a :class:`StateSourceError` whose message
is one line.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.checkpoint_store.catalog import (
    RestoreSourceNotFound,
    UnusableRestoreSource,
    job_in_storage,
    resolve_restore_source,
)
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
from tidemark.storage.base import CheckpointStorage, StorageError
from tidemark.types import CheckpointId, JobId, OperatorId


class StateSourceError(LookupError):
    """What an operator named cannot be read: the message is one line."""


class UnknownStage(StateSourceError):
    """The snapshot holds no task of that stage."""


class UnknownState(StateSourceError):
    """The stage's snapshot records no state of that name."""


@dataclass(frozen=True)
class StateSource:
    """A retained checkpoint or savepoint: where its ``_metadata`` is and what it holds."""

    storage: CheckpointStorage
    path: str
    metadata: CheckpointMetadata

    @property
    def stages(self) -> list[OperatorId]:
        """The stages (operator ids) with tasks in the snapshot, in the order they first appear."""
        return list(dict.fromkeys(t.operator_id for t in self.metadata.tasks))

    def tasks(self, stage: str) -> list[TaskSnapshot]:
        """The old tasks of ``stage`` in subtask order; :class:`UnknownStage` if it has none."""
        tasks = sorted((t for t in self.metadata.tasks if t.operator_id == stage), key=lambda t: t.subtask_index)
        if not tasks:
            raise UnknownStage(f"{self.path} has no stage {stage!r}; its stages: "
                               f"{', '.join(self.stages) or 'none'}")
        return tasks


def open_source(storage: CheckpointStorage, job: str, *, checkpoint_id: int | None = None,
                path: str | None = None) -> StateSource:
    """The retained checkpoint or savepoint ``checkpoint_id`` of ``job``, or the ``_metadata`` at
    ``path`` (a directory holding one is accepted); exactly one of the two."""
    if (checkpoint_id is None) == (path is None):
        raise StateSourceError("name either a checkpoint id or a savepoint path")
    if path is not None:
        path = path.strip("/")
        if not path.endswith("_metadata"):
            path = f"{path}/_metadata"
    try:
        stored = resolve_restore_source(storage, JobId(job),
                                        None if checkpoint_id is None else CheckpointId(checkpoint_id), path)
    except RestoreSourceNotFound as exc:
        if checkpoint_id is not None and not job_in_storage(storage, JobId(job)):
            raise StateSourceError(f"job {job!r} has nothing in checkpoint storage") from None
        raise StateSourceError(str(exc)) from None
    except (UnusableRestoreSource, StorageError, ValueError) as exc:
        raise StateSourceError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    return StateSource(storage, stored.path, stored.metadata)
