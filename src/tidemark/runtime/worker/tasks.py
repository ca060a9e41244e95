"""Building a stage's tasks: one per key-group range, each with its keyed backend.

``build_stage_tasks(...)`` is called once per attempt, before the restore: it plans the task
assignments of the stage's operator (Flink's key-group ranges) and creates each task's keyed
backend through the state registry (:func:`tidemark.state.backend_registry.create_backend`: heap, or
RocksDB on local disk under ``local_dir``, with the job's profile and options factory and the
worker process's one memory budget, :func:`worker_rocksdb_memory`); in changelog mode the registry wraps it with the
changelog backend, so every state change is also written to the stage's changelog topic, and a
restore reads the changelog ranges back.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from tidemark.changelog import ChangelogReader, ChangelogWriter
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange
from tidemark.materializer.storage import SharedFilesView, materialization_prefix
from tidemark.protocol.messages import TaskAssignment, TaskSnapshot
from tidemark.api import JobSpec, Stage, StateBackendKind
from tidemark.config.settings import RocksDBSettings
from tidemark.operators.time import StageTime
from tidemark.runtime.worker.task import StageTask
from tidemark.state.timers import Timer
from tidemark.changelog.backend import ChangelogWiring
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.rocksdb.options import RocksDBMemory, RocksDBSetup
from tidemark.storage.base import CheckpointStorage
from tidemark.types import Epoch, JobId, TaskId


@dataclass(frozen=True)
class ChangelogTarget:
    """Where a changelog-mode stage writes its state changes (and reads them back on restore);
    ``storage`` is the checkpoint storage a restore that must rebase writes the new base into."""

    client: dict[str, Any]
    topic: str
    partitions: int
    epoch: Epoch
    storage: CheckpointStorage


def worker_rocksdb_memory(settings: RocksDBSettings) -> RocksDBMemory:
    """The RocksDB memory budget of this worker process: every attempt's RocksDB tasks share it (a
    process that takes the next attempt in place keeps it; the old attempt's databases are closed
    by then)."""
    return _process_rocksdb_memory(settings.memory_bytes, settings.write_buffer_ratio)


@functools.lru_cache(maxsize=1)
def _process_rocksdb_memory(budget_bytes: int, write_buffer_ratio: float) -> RocksDBMemory:
    return RocksDBMemory.budget(budget_bytes, write_buffer_ratio)


def build_stage_tasks(spec: JobSpec, stage: Stage, parallelism: int, local_dir: Path,
                      changelog: ChangelogTarget | None, subtasks: range | None = None,
                      time: StageTime | None = None,
                      timer_failed: Callable[[Timer, Exception], None] | None = None,
                      rocksdb_memory: RocksDBMemory | None = None) -> list[StageTask]:
    """The tasks of ``subtasks`` (the worker's own, :mod:`tidemark.runtime.job.ownership`; all by
    default), sharing ``time`` (the worker's watermark and clock); a timer whose ``on_timer``
    raises goes to ``timer_failed`` (else the error propagates). RocksDB tasks are built with the
    job's profile and options factory (``JobSpec.rocksdb``) and share ``rocksdb_memory`` (else each
    has its own)."""
    reader = (ChangelogReader(changelog.client, partitions=changelog.partitions,
                              max_parallelism=spec.max_parallelism) if changelog is not None else None)
    backend_options = (RocksDBSetup.of(spec.rocksdb, rocksdb_memory)
                       if spec.state_backend is StateBackendKind.ROCKSDB else None)
    tasks = []
    for assignment in plan_assignments((stage.operator_id,), parallelism, spec.max_parallelism):
        if subtasks is not None and assignment.subtask_index not in subtasks:
            continue
        context = BackendContext(key_group_range(assignment), spec.max_parallelism, stage.name,
                                 local_dir / assignment.task_id.replace("#", "-"), backend_options=backend_options)
        wirings: tuple[ChangelogWiring, ...] = ()
        if changelog is not None:
            wirings = (_changelog_wiring(changelog, reader, spec.job_id, assignment.task_id,
                                         spec.max_parallelism),)
        backend = create_backend(spec.state_backend.value, context, *wirings)
        tasks.append(StageTask(stage, assignment, parallelism, backend, time, timer_failed))
    return tasks


def _changelog_wiring(target: ChangelogTarget, reader: ChangelogReader | None, job: JobId, task: TaskId,
                      max_parallelism: int) -> ChangelogWiring:
    writer = ChangelogWriter(target.client, target.topic, partitions=target.partitions,
                             max_parallelism=max_parallelism, job_id=job, task_id=task, epoch=target.epoch)
    rebase_to = SharedFilesView(target.storage, materialization_prefix(job, task),
                                f"restored-e{target.epoch}-{secrets.token_hex(4)}")
    return ChangelogWiring(writer, reader, rebase_to)


def key_group_range(assignment: TaskAssignment | TaskSnapshot) -> KeyGroupRange:
    return KeyGroupRange(assignment.key_group_start, assignment.key_group_end)
