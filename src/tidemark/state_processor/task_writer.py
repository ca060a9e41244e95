"""Writing the keyed state of a stage's new tasks, through the backends' own snapshot code.

A :class:`StageWriter` holds one :class:`TaskWriter` per new task of a stage: the key-group
ranges of ``parallelism`` subtasks under ``max_parallelism`` (the planner's assignments, as a
job's tasks get them). Each task writer is a fresh backend of the chosen kind (``heap`` in
memory, ``rocksdb`` in a scratch directory) for its key groups, given the state definitions
first (as a restore records a snapshot's header) and then each canonical entry as a restored
entry is applied (``apply_change`` of a ``PUT``); :meth:`StageWriter.add` routes an entry to the
task whose range holds its key group. :meth:`TaskWriter.finish` takes the backend's canonical
snapshot into the savepoint's folder (a :class:`~tidemark.storage.scoped.SnapshotStorage`) and
closes it; a stage writer's scratch directory is removed when it closes.

The backends' TTL clock stands before every write (as the reader's scratch backends' does): a
value with TTL is written as given, with its timestamp, whatever time it is; the job that restores
it checks its TTL by its own clock.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange, operator_index
from tidemark.protocol.messages import (
    SinkTransaction,
    SourceOffset,
    StateChangeOp,
    StateHandle,
    TaskAssignment,
    TaskSnapshot,
)
from tidemark.state.backend import KeyedStateBackend
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.snapshot import Entry
from tidemark.state.table import KeyedStateChange
from tidemark.state.ttl import ManualClock
from tidemark.state_processor.task_restore import BEFORE_EVERY_WRITE
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, OperatorId


class TaskWriter:
    """The keyed state of one new task, fed canonical entries (see the module docstring)."""

    def __init__(self, assignment: TaskAssignment, max_parallelism: int, backend: str,
                 metas: Sequence[dict[str, Any]], local_dir: Path) -> None:
        self.assignment = assignment
        self.key_groups = KeyGroupRange(assignment.key_group_start, assignment.key_group_end)
        context = BackendContext(self.key_groups, max_parallelism, assignment.operator_id, local_dir,
                                 clock=ManualClock(BEFORE_EVERY_WRITE))
        self.backend: KeyedStateBackend = create_backend(backend, context)
        self.entries = 0
        try:
            self.define(metas)
        except BaseException:
            self.backend.close()
            raise

    def define(self, metas: Sequence[dict[str, Any]], source: str = "the state written") -> None:
        """Record state definitions, before entries of those states are added (a definition
        already recorded is kept; another one of the same state is a schema evolution, as in a
        restore)."""
        self.backend.restore_state_metas(list(metas), f"{source} for {self.assignment.task_id}")

    def add(self, entry: Entry) -> None:
        self.backend.apply_change(KeyedStateChange(entry.state_name, entry.key_group, entry.key, entry.namespace,
                                                   StateChangeOp.PUT, entry.user_key, entry.value))
        self.entries += 1

    def finish(self, checkpoint_id: int, files: SnapshotStorage, *,
               operator_handles: Sequence[StateHandle] = (), source_offsets: Sequence[SourceOffset] = (),
               sink_transactions: Sequence[SinkTransaction] = ()) -> TaskSnapshot:
        """The task's canonical snapshot, written into ``files``, with what else the task carries."""
        try:
            keyed = self.backend.snapshot(CheckpointId(checkpoint_id), files, canonical=True)
        finally:
            self.backend.close()
        a = self.assignment
        return TaskSnapshot(a.task_id, a.operator_id, a.subtask_index, a.key_group_start, a.key_group_end,
                            state_handles=tuple(keyed.handles) + tuple(operator_handles),
                            source_offsets=tuple(source_offsets), sink_transactions=tuple(sink_transactions))

    def close(self) -> None:
        self.backend.close()


def new_assignments(stage: str, parallelism: int, max_parallelism: int) -> tuple[TaskAssignment, ...]:
    """The tasks of ``stage`` at ``parallelism`` under ``max_parallelism``, in subtask order."""
    return plan_assignments((OperatorId(stage),), parallelism, max_parallelism)


class StageWriter:
    """Every new task of one stage (or only ``subtasks`` of them), each a :class:`TaskWriter`."""

    def __init__(self, stage: str, parallelism: int, max_parallelism: int, backend: str,
                 metas: Sequence[dict[str, Any]], subtasks: Iterable[int] | None = None) -> None:
        self.stage = stage
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self._scratch = Path(tempfile.mkdtemp(prefix="tidemark-state-write-"))
        wanted = set(range(parallelism) if subtasks is None else subtasks)
        self.tasks: dict[int, TaskWriter] = {}
        try:
            for assignment in new_assignments(stage, parallelism, max_parallelism):
                if assignment.subtask_index in wanted:
                    self.tasks[assignment.subtask_index] = TaskWriter(
                        assignment, max_parallelism, backend, metas,
                        self._scratch / assignment.task_id.replace("#", "-"))
        except BaseException:
            self.close()
            raise

    def subtask_of(self, key_group: int) -> int:
        return int(operator_index(self.max_parallelism, self.parallelism, key_group))

    def add(self, entry: Entry) -> None:
        """Hand ``entry`` to the task whose key groups hold it (``KeyError``: not one of ours)."""
        self.tasks[self.subtask_of(entry.key_group)].add(entry)

    def define(self, metas: Sequence[dict[str, Any]], source: str = "the state written") -> None:
        """:meth:`TaskWriter.define` on every task."""
        for task in self.tasks.values():
            task.define(metas, source)

    @property
    def entries(self) -> int:
        return sum(t.entries for t in self.tasks.values())

    def close(self) -> None:
        """Close every task's backend and remove the scratch directory; idempotent."""
        for task in self.tasks.values():
            task.close()
        shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> StageWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
