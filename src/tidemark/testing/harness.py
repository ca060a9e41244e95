"""A test harness for one stage's :class:`~tidemark.runtime.api.KeyedProcessFunction` (Flink:
``KeyedOneInputStreamOperatorTestHarness``): the function runs on the runtime's own tasks
(:class:`~tidemark.runtime.task.StageTask`, one per key-group range, routed by
:class:`~tidemark.runtime.routing.KeyGroupRouter`) with a real heap or RocksDB state backend, and
without Kafka, Spark or any service.

Lifecycle: ``KeyedProcessFunctionHarness(stage, ...)`` (or :meth:`~KeyedProcessFunctionHarness.for_stage`
for a stage of a job) -> ``restore(snapshot)`` at most once -> ``open()`` -> ``process(value)`` /
``process_record(key, value)`` any number of times, reading :attr:`output` and :meth:`state` in
between, moving event time with :meth:`advance_watermark` and processing time with
:meth:`advance_processing_time` (both fire the timers they pass, as the worker does), taking
:meth:`snapshot` s and telling the tasks of their end (:meth:`notify_checkpoint_complete`,
:meth:`notify_checkpoint_aborted`) -> ``close()``. A :class:`~tidemark.runtime.api.CheckpointedFunction`
gets ``initialize_state`` in ``open()`` (restored or not) and ``snapshot_state`` in each snapshot. It is a context
manager: ``with harness:`` opens it and closes it.

A snapshot is what a savepoint of the stage holds: every task's canonical keyed state files and
operator state under ``<job>/savepoints/sp-<id>/`` of a filesystem checkpoint storage, and a
``_metadata`` file as the checkpoint-store writes it. A fresh harness restores it with the
runtime's restore planner, at the same or another parallelism (keyed state is redistributed by key
group), exactly as a worker restores a savepoint; it can also restore a savepoint a running job
took (:meth:`~KeyedProcessFunctionHarness.restore_path`), if the stage name is the same.

Timers are the tasks' keyed state, so a snapshot holds them and a restore (at any parallelism)
brings them back. What it does not do: barriers, alignment, watermarks from partitions or
channels (the test sets the watermark), late records, outputs to Kafka and the changelog backend
(those need a broker; ``tests/integration`` and ``tests/e2e`` cover them).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tidemark.clock import now_ms
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.checkpoint_store.layout import checkpoint_dir, metadata_path, shared_dir
from tidemark.checkpoint_store.metadata_codec import encode_metadata
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.protocol.messages import CheckpointMetadata, StateHandleKind, TaskSnapshot
from tidemark.runtime.api import JobSpec, KeyedProcessFunction, Stage, StateBackendKind
from tidemark.runtime.routing import KeyGroupRouter
from tidemark.runtime.stage_restore import keyed_snapshots
from tidemark.runtime.task import StageTask, StageTime
from tidemark.keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange, check_max_parallelism
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.timers import TimeDomain, Timer
from tidemark.state.ttl import ManualClock
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, CheckpointType, JobId, TaskId

_NO_KEY = object()


@dataclass(frozen=True)
class Emitted:
    """One record a function emitted, encoded as the stage writes it to Kafka."""

    task: TaskId
    key: bytes | None
    value: bytes
    timestamp_ms: int = 0  # the record's event time (the input's, or the timer's)

    def decoded(self) -> Any:
        """The value as JSON (the stages' default encoding, ``tidemark.runtime.api.json_encode``)."""
        return json.loads(self.value)


@dataclass(frozen=True)
class HarnessSnapshot:
    """A savepoint of the harness's tasks: ``_metadata`` at :attr:`path` in :attr:`storage`."""

    storage: CheckpointStorage
    path: str
    metadata: CheckpointMetadata
    keep_alive: Any = field(default=None, repr=False, compare=False)  # the harness's temporary storage


class KeyedProcessFunctionHarness:
    """Runs ``stage.function`` on ``parallelism`` tasks with real keyed state (see the module)."""

    def __init__(self, stage: Stage, *, parallelism: int = 1, max_parallelism: int = DEFAULT_MAX_PARALLELISM,
                 state_backend: StateBackendKind | str = StateBackendKind.HEAP, job_id: str = "harness",
                 storage: CheckpointStorage | None = None, clock: ManualClock | None = None) -> None:
        check_max_parallelism(max_parallelism)
        if not 1 <= parallelism <= max_parallelism:
            raise ValueError(f"parallelism must be in 1..{max_parallelism}, got {parallelism}")
        self.stage = stage
        self.job_id = JobId(job_id)
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.state_backend = StateBackendKind(state_backend)
        self.clock = clock or ManualClock(0)
        """Processing time of the state (TTL) and the default record timestamp; move it with
        ``harness.clock.advance(ms)``."""
        self._local = tempfile.TemporaryDirectory(prefix="tidemark-harness-")
        if storage is None:
            self._storage_dir: tempfile.TemporaryDirectory[str] | None = tempfile.TemporaryDirectory(
                prefix="tidemark-harness-storage-")
            storage = FilesystemCheckpointStorage(self._storage_dir.name)
        else:
            self._storage_dir = None
        self.storage = storage
        self.time = StageTime(clock=self.clock.now_ms)
        """The tasks' watermark (``current_watermark()``) and processing time (the clock)."""
        self.tasks: list[StageTask] = []
        for assignment in plan_assignments((stage.operator_id,), parallelism, max_parallelism):
            key_groups = KeyGroupRange(assignment.key_group_start, assignment.key_group_end)
            local_dir = Path(self._local.name) / assignment.task_id.replace("#", "-")
            context = BackendContext(key_groups, max_parallelism, stage.name, local_dir, clock=self.clock)
            backend = create_backend(self.state_backend.value, context)
            self.tasks.append(StageTask(stage, assignment, parallelism, backend, self.time))
        self.router = KeyGroupRouter(max_parallelism, [t.key_groups for t in self.tasks])
        self.output: list[Emitted] = []
        """Everything emitted so far, in order; :meth:`clear_output` empties it."""
        self.restored_from: CheckpointMetadata | None = None
        self._opened = self._closed = False
        self._next_snapshot = 1

    @classmethod
    def for_stage(cls, job: JobSpec, stage: str, *, parallelism: int | None = None,
                  state_backend: StateBackendKind | str | None = None, **options: Any) -> KeyedProcessFunctionHarness:
        """A harness for the stage named ``stage`` of ``job``, with the job's parallelism, max
        parallelism and state backend unless given."""
        return cls(job.stage(stage), parallelism=parallelism or job.parallelism,
                   max_parallelism=job.max_parallelism, state_backend=state_backend or job.state_backend,
                   job_id=job.job_id, **options)

    @classmethod
    def for_function(cls, function: Callable[[], KeyedProcessFunction], key_by: Callable[[Any], Any], *,
                     name: str = "function", **options: Any) -> KeyedProcessFunctionHarness:
        """A harness for a function outside any job: ``key_by`` keys each value."""
        return cls(Stage(name, ("harness-input",), key_by, function, "harness-output"), **options)

    # ------------------------------------------------------------------ lifecycle

    def restore(self, snapshot: HarnessSnapshot) -> KeyedProcessFunctionHarness:
        """Restore a snapshot (of a harness at any parallelism with the same max parallelism);
        before :meth:`open`, at most once."""
        return self.restore_path(snapshot.storage, snapshot.path)

    def restore_path(self, storage: CheckpointStorage, path: str) -> KeyedProcessFunctionHarness:
        """Restore the checkpoint or savepoint whose ``_metadata`` is at ``path`` in ``storage``
        (e.g. a savepoint of a real job, from its checkpoint storage), as a worker does."""
        if self._opened or self.restored_from is not None:
            raise RuntimeError("restore once, before open()")
        metadata = read_metadata(storage, path)
        if metadata.max_parallelism != self.max_parallelism:
            raise ValueError(f"{path} has max parallelism {metadata.max_parallelism}, "
                             f"the harness {self.max_parallelism}: key groups cannot be mapped")
        operator = self.stage.operator_id
        if not any(t.operator_id == operator for t in metadata.tasks):
            raise ValueError(f"{path} holds no state of stage {operator!r}; "
                             f"it has {sorted({t.operator_id for t in metadata.tasks})}")
        operator_handles = [h for t in metadata.tasks if t.operator_id == operator
                            for h in t.state_handles if h.kind is StateHandleKind.OPERATOR]
        for task in self.tasks:
            task.restore(keyed_snapshots(metadata, operator, task.key_groups), operator_handles, storage,
                         CheckpointId(metadata.checkpoint_id))
        self.restored_from = metadata
        return self

    def open(self) -> KeyedProcessFunctionHarness:
        """Call every task's ``open(ctx)`` (the function registers its state)."""
        if self._opened:
            raise RuntimeError("the harness is already open")
        for task in self.tasks:
            task.open()
        self._opened = True
        return self

    def close(self) -> None:
        """Close the functions and backends and delete the harness's local files (and its
        storage, unless one was given or a snapshot still refers to it)."""
        if self._closed:
            return
        self._closed = True
        try:
            for task in self.tasks:
                task.close()
        finally:
            self._local.cleanup()

    def __enter__(self) -> KeyedProcessFunctionHarness:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    # ------------------------------------------------------------------ records

    def process(self, value: Any, *, key: Any = _NO_KEY, timestamp_ms: int | None = None) -> list[Emitted]:
        """Process one value: keyed by the stage's ``key_by`` unless ``key`` is given, routed by
        key group to its task; returns what this record emitted (also appended to :attr:`output`).
        ``timestamp_ms`` (``ctx.timestamp_ms``) defaults to the clock's time."""
        if not self._opened or self._closed:
            raise RuntimeError("open() the harness first (or use it as a context manager)")
        if key is _NO_KEY:
            key = self.stage.key_by(value)
        task = self.tasks[self.router.task_index(key)]
        stamp = self.clock.now_ms() if timestamp_ms is None else timestamp_ms
        return self._emitted(task, task.process(key, value, stamp))

    def _emitted(self, task: StageTask, records: Iterable[tuple[bytes | None, bytes, int]]) -> list[Emitted]:
        emitted = [Emitted(task.task_id, k, v, t) for k, v, t in records]
        self.output.extend(emitted)
        return emitted

    # ------------------------------------------------------------------ time

    def advance_watermark(self, watermark_ms: int) -> list[Emitted]:
        """Move the watermark (never back) and fire the event-time timers at or before it, in time
        order per task; returns what they emitted (also appended to :attr:`output`)."""
        self._check_open()
        self.time.watermark = max(self.time.watermark, watermark_ms)
        return self._fire(TimeDomain.EVENT_TIME, self.time.watermark)

    def advance_processing_time(self, ms: int) -> list[Emitted]:
        """Move the clock by ``ms`` and fire the processing-time timers due by then."""
        self._check_open()
        self.clock.advance(ms)
        return self._fire(TimeDomain.PROCESSING_TIME, self.clock.now_ms())

    def _fire(self, domain: TimeDomain, until: int) -> list[Emitted]:
        def failed(timer: Timer, error: Exception) -> None:
            raise error

        return [record for task in self.tasks for record in self._emitted(task, task.fire(domain, until, failed))]

    def timers(self, key: Any, domain: TimeDomain | str = TimeDomain.EVENT_TIME) -> list[int]:
        """The timers of ``key`` in ``domain``, in time order."""
        task = self.task_for(key)
        assert task.timers is not None, "open() the harness first"
        task.backend.set_current_key(key)
        return task.timers.timestamps(TimeDomain(domain))

    def _check_open(self) -> None:
        if not self._opened or self._closed:
            raise RuntimeError("open() the harness first (or use it as a context manager)")

    def process_all(self, values: Iterable[Any]) -> list[Emitted]:
        return [record for value in values for record in self.process(value)]

    def process_record(self, key: bytes | None, value: bytes | None, *,
                       timestamp_ms: int | None = None) -> list[Emitted]:
        """Process one Kafka record as the worker does: the stage's ``decode``, then ``key_by``."""
        return self.process(self.stage.decode(key, value), timestamp_ms=timestamp_ms)

    def output_values(self) -> list[Any]:
        """The values of :attr:`output`, decoded as JSON."""
        return [record.decoded() for record in self.output]

    def clear_output(self) -> None:
        self.output.clear()

    # ------------------------------------------------------------------ state

    def task_for(self, key: Any) -> StageTask:
        """The task whose key groups hold ``key``."""
        return self.tasks[self.router.task_index(key)]

    def state(self, descriptor: Any, key: Any) -> Any:
        """The state handle of ``descriptor`` with ``key`` current (on its task's backend), to
        read (or set up) state: ``harness.state(ValueStateDescriptor("hits", default=0), "/a").value()``.
        The next record sets its own key, so reading here does not disturb processing."""
        backend = self.task_for(key).backend
        backend.set_current_key(key)
        return backend.get_state(descriptor)

    def cleanup_expired_state(self) -> int:
        """Remove expired TTL entries now (as a full snapshot does); returns how many."""
        return sum(task.backend.cleanup_expired_state() for task in self.tasks)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, checkpoint_id: int | None = None) -> HarnessSnapshot:
        """Snapshot every task into the harness's storage as a savepoint (canonical format) and
        write its ``_metadata``; processing may go on afterwards."""
        if not self._opened or self._closed:
            raise RuntimeError("snapshot an open harness")
        cid = CheckpointId(checkpoint_id if checkpoint_id is not None else self._next_snapshot)
        self._next_snapshot = cid + 1
        kind = CheckpointType.SAVEPOINT
        storage = SnapshotStorage(self.storage, checkpoint_dir(self.job_id, cid, kind), shared_dir(self.job_id))
        started = now_ms()
        tasks = []
        for task in self.tasks:
            keyed, operator = task.snapshot(cid, storage, canonical=True, operator_items={})
            assignment = task.assignment
            tasks.append(TaskSnapshot(task.task_id, assignment.operator_id, assignment.subtask_index,
                                      assignment.key_group_start, assignment.key_group_end,
                                      state_handles=keyed.handles + operator))
        size = sum(h.state_size_bytes for t in tasks for h in t.state_handles)
        metadata = CheckpointMetadata(self.job_id, cid, kind, started, now_ms(),
                                      self.max_parallelism, tuple(tasks), state_size_bytes=size,
                                      checkpointed_size_bytes=size)
        path = metadata_path(self.job_id, cid, kind)
        self.storage.write_bytes(path, encode_metadata(metadata))
        return HarnessSnapshot(self.storage, path, metadata, self._storage_dir)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Tell every task that checkpoint ``checkpoint_id`` completed (as the worker does on the
        coordinator's notification): its backend, and a :class:`CheckpointListener` function."""
        self._check_open()
        for task in self.tasks:
            task.notify_completed(CheckpointId(checkpoint_id))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Tell every task that checkpoint ``checkpoint_id`` was aborted."""
        self._check_open()
        for task in self.tasks:
            task.notify_aborted(CheckpointId(checkpoint_id))
