"""A test harness for one stage's :class:`~tidemark.api.KeyedProcessFunction` or windows
(:class:`~tidemark.windows.Windowed`; Flink: ``KeyedOneInputStreamOperatorTestHarness``): the
function runs on the runtime's own tasks
(:class:`~tidemark.runtime.worker.task.StageTask`, one per key-group range, routed by
:class:`~tidemark.runtime.worker.routing.KeyGroupRouter`, each running the function in its
:class:`~tidemark.operators.keyed_process.KeyedProcessOperator`, or the windows in its
:class:`~tidemark.operators.window.WindowOperator`) with a real heap or RocksDB state
backend, optionally with the changelog backend over an in-memory changelog
(:class:`~tidemark.testing.changelog.InMemoryChangelogTopic`), and without Kafka, Spark or any
service. ``operator=`` runs another operator of the stage instead (any
:class:`~tidemark.operators.lifecycle.StreamOperator`, e.g. one that records its lifecycle).

Lifecycle: ``KeyedProcessFunctionHarness(stage, ...)`` (or :meth:`~KeyedProcessFunctionHarness.for_stage`
for a stage of a job) -> ``restore(snapshot)`` at most once -> ``open()`` -> ``process(value)`` /
``process_record(key, value)`` any number of times (an input with a Spark step: its rows from
:meth:`~KeyedProcessFunctionHarness.spark_step_rows`), reading :attr:`output`, :meth:`side_output`
and :meth:`state` in between, moving event time with :meth:`advance_watermark` and processing time with
:meth:`advance_processing_time` (both fire the timers they pass, as the worker does), taking
:meth:`snapshot` s and telling the tasks of their end (:meth:`notify_checkpoint_complete`,
:meth:`notify_checkpoint_aborted`) -> ``close()`` (a failover: then restore a fresh harness), or
:meth:`stop_with_savepoint` (the savepoint, its completion, ``finish``, ``close``). A
:class:`~tidemark.api.CheckpointedFunction` gets ``initialize_state`` in ``open()`` (restored
or not) and ``snapshot_state`` in each snapshot. It is a context manager: ``with harness:`` opens
it and closes it.

A snapshot is by default what a savepoint of the stage holds: every task's canonical keyed state
files and operator state under ``<job>/savepoints/sp-<id>/`` of a filesystem checkpoint storage,
and a ``_metadata`` file as the checkpoint-store writes it (``savepoint=False``: a checkpoint, in
the backend's own form). A fresh harness restores it with the runtime's restore planner, at the
same or another parallelism (keyed state is redistributed by key group), exactly as a worker
restores; it can also restore a savepoint a running job took
(:meth:`~KeyedProcessFunctionHarness.restore_path`), if the stage name is the same.

Timers are the tasks' keyed state, so a snapshot holds them and a restore (at any parallelism)
brings them back. What it does not do: barriers, alignment, watermarks from partitions or
channels (the test sets the watermark), late records and outputs to Kafka (those need a broker;
``tests/integration`` and ``tests/e2e`` cover them); records a windowed stage finds too late are
collected in :attr:`~KeyedProcessFunctionHarness.too_late`.
"""

from __future__ import annotations

import itertools
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
from tidemark.api import (
    BroadcastProcessFunction,
    CoProcessFunction,
    Input,
    JobSpec,
    OutputTag,
    ProcessFunction,
    RocksDBConfig,
    Stage,
    StateBackendKind,
    takes_broadcast,
    two_inputs,
)
from tidemark.runtime.worker.routing import KeyGroupRouter
from tidemark.runtime.worker.restore import keyed_snapshots
from tidemark.operators.lifecycle import split_side_records
from tidemark.operators.time import StageTime
from tidemark.changelog.backend import ChangelogWiring
from tidemark.materializer.storage import SharedFilesView
from tidemark.runtime.worker.task import OperatorFactory, StageTask
from tidemark.testing.changelog import InMemoryChangelogReader, InMemoryChangelogTopic, InMemoryChangelogWriter
from tidemark.keygroups import DEFAULT_MAX_PARALLELISM, KeyGroupRange, check_max_parallelism
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.state.rocksdb.options import RocksDBSetup
from tidemark.state.timers import TimeDomain
from tidemark.state.ttl import ManualClock
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, CheckpointType, JobId, TaskId

_NO_KEY = object()
_ATTEMPTS = itertools.count(1)


@dataclass(frozen=True)
class Emitted:
    """One record a function emitted, encoded as the stage writes it to Kafka."""

    task: TaskId
    key: bytes | None
    value: bytes
    timestamp_ms: int = 0  # the record's event time (the input's, or the timer's)

    def decoded(self) -> Any:
        """The value as JSON (the stages' default encoding, ``tidemark.api.json_encode``)."""
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
                 storage: CheckpointStorage | None = None, clock: ManualClock | None = None,
                 changelog: InMemoryChangelogTopic | None = None,
                 operator: OperatorFactory | None = None, rocksdb: RocksDBConfig = RocksDBConfig()) -> None:
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
            context = BackendContext(key_groups, max_parallelism, stage.name, local_dir, clock=self.clock,
                                     backend_options=RocksDBSetup.of(rocksdb)
                                     if self.state_backend is StateBackendKind.ROCKSDB else None)
            wirings = () if changelog is None else (self._changelog_wiring(changelog, assignment.task_id),)
            backend = create_backend(self.state_backend.value, context, *wirings)
            self.tasks.append(StageTask(stage, assignment, parallelism, backend, self.time, operator=operator))
        self.router = KeyGroupRouter(max_parallelism, [t.key_groups for t in self.tasks])
        self.output: list[Emitted] = []
        """Everything emitted to the stage's output so far, in order; :meth:`clear_output` empties it."""
        self.side_outputs: dict[str, list[Emitted]] = {name: [] for name in stage.side_output_topics}
        """Everything written to each side output so far (``ctx.output``), by name, in order
        (:meth:`side_output`); :meth:`clear_output` empties them too."""
        self.too_late: list[Any] = []
        """The values a windowed stage found too late for all their windows, in order (a worker
        applies the stage's ``late_records`` to them: dropped, or written to ``late_output``)."""
        self.step_rejected: list[tuple[bytes | None, str]] = []
        """What :meth:`spark_step_rows` left out: each rejected record's value and null columns."""
        self.restored_from: CheckpointMetadata | None = None
        self._opened = self._closed = False
        self._next_snapshot = 1

    def _changelog_wiring(self, topic: InMemoryChangelogTopic, task: TaskId) -> ChangelogWiring:
        """Each harness is a new attempt on the topic (a new epoch), as a restarted worker is."""
        epoch = next(_ATTEMPTS)
        writer = InMemoryChangelogWriter(topic, max_parallelism=self.max_parallelism, job_id=self.job_id,
                                         task_id=task, epoch=epoch)
        reader = InMemoryChangelogReader(topic, max_parallelism=self.max_parallelism)
        return ChangelogWiring(writer, reader, SharedFilesView(self.storage, f"rebased/{task}", f"e{epoch}"))

    @classmethod
    def for_stage(cls, job: JobSpec, stage: str, *, parallelism: int | None = None,
                  state_backend: StateBackendKind | str | None = None, **options: Any) -> KeyedProcessFunctionHarness:
        """A harness for the stage named ``stage`` of ``job``, with the job's parallelism, max
        parallelism and state backend unless given, and its RocksDB configuration."""
        return cls(job.stage(stage), parallelism=parallelism or job.parallelism,
                   max_parallelism=job.max_parallelism, state_backend=state_backend or job.state_backend,
                   job_id=job.job_id, rocksdb=job.rocksdb, **options)

    @classmethod
    def for_function(cls, function: Callable[[], ProcessFunction | CoProcessFunction | BroadcastProcessFunction],
                     key_by: Callable[[Any], Any] | tuple[Callable[[Any], Any], Callable[[Any], Any]] | None, *,
                     name: str = "function", side_outputs: Iterable[OutputTag | str] = (),
                     **options: Any) -> KeyedProcessFunctionHarness:
        """A harness for a function outside any job: ``key_by`` keys each value (None: a stage
        without a key, running a :class:`~tidemark.api.ProcessFunction`). A two-input function
        (a :class:`~tidemark.api.CoProcessFunction` class) gets two inputs, keyed by the two
        functions of ``key_by`` when it is a pair; a broadcast function (a
        :class:`~tidemark.api.BroadcastProcessFunction` class) its input, keyed by ``key_by``,
        and a broadcast input (``input=1``). ``side_outputs``: the side outputs the function
        writes to (:meth:`side_output`)."""
        names = [tag.name if isinstance(tag, OutputTag) else tag for tag in side_outputs]
        sides = {name: f"harness-side-output-{name}" for name in names}
        if isinstance(key_by, tuple):
            keyed = tuple(Input(f"harness-input-{n}", key_by=key) for n, key in enumerate(key_by, 1))
            return cls(Stage(name, keyed, None, function, "harness-output", side_outputs=sides), **options)
        if takes_broadcast(function):
            inputs = (Input("harness-input-1"), Input("harness-broadcast", broadcast=True))
            return cls(Stage(name, inputs, key_by, function, "harness-output", side_outputs=sides), **options)
        topics = ("harness-input-1", "harness-input-2") if two_inputs(function) else ("harness-input",)
        return cls(Stage(name, topics, key_by, function, "harness-output", side_outputs=sides), **options)

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

    def process(self, value: Any, *, key: Any = _NO_KEY, timestamp_ms: int | None = None,
                partition: int = 0, input: int = 0) -> list[Emitted]:
        """Process one value of the stage's input number ``input`` (a two-input function's
        ``process_element1`` for 0, ``process_element2`` for 1): keyed by that input's ``key_by``
        (else the stage's) unless ``key`` is given, routed by key group to its task; returns what
        this record emitted (also appended to :attr:`output`). In a stage without a key
        (``key_by=None``) the record goes, as in a worker, to the task of its input ``partition``
        (task ``partition % parallelism``). A broadcast input's value goes to every task, in task
        order, as a worker hands it (a broadcast function's ``process_broadcast_element``).
        ``timestamp_ms`` (``ctx.timestamp_ms``) defaults to the clock's time."""
        if not self._opened or self._closed:
            raise RuntimeError("open() the harness first (or use it as a context manager)")
        inputs = self.stage.input_list
        if not 0 <= input < len(inputs):
            raise ValueError(f"stage {self.stage.name} has {len(inputs)} input(s), not an input {input}")
        if inputs[input].broadcast:
            stamp = self.clock.now_ms() if timestamp_ms is None else timestamp_ms
            emitted = []
            for task in self.tasks:
                task.process(None, value, stamp, input)
                emitted.extend(self._emitted(task))
            return emitted
        if not self.stage.keyed:
            key, task = None, self.tasks[partition % len(self.tasks)]
        else:
            if key is _NO_KEY:
                key = self.stage.key_of(inputs[input])(value)  # type: ignore[misc]
            task = self.tasks[self.router.task_index(key)]
        stamp = self.clock.now_ms() if timestamp_ms is None else timestamp_ms
        if task.process(key, value, stamp, input) is False:
            self.too_late.append(value)
        return self._emitted(task)

    def _emitted(self, task: StageTask) -> list[Emitted]:
        main, sides = split_side_records(task.take_output())
        for name, records in sides.items():
            self.side_outputs[name].extend(Emitted(task.task_id, k, v, t) for k, v, t in records)
        emitted = [Emitted(task.task_id, k, v, t) for k, v, t in main]
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
        """Move the clock by ``ms``, fire the processing-time timers due by then, and run each
        task's incremental TTL cleanup, as a worker's tick does."""
        self._check_open()
        self.clock.advance(ms)
        emitted = self._fire(TimeDomain.PROCESSING_TIME, self.clock.now_ms())
        for task in self.tasks:  # as a worker's tick does
            task.clean_up_expired()
        return emitted

    def _fire(self, domain: TimeDomain, until: int) -> list[Emitted]:
        emitted = []
        for task in self.tasks:
            task.fire(domain, until)  # a failing on_timer raises here
            emitted.extend(self._emitted(task))
        return emitted

    def timers(self, key: Any, domain: TimeDomain | str = TimeDomain.EVENT_TIME, namespace: Any = None) -> list[int]:
        """The timers of ``key`` in ``domain``, in time order: a function's own, or with
        ``namespace`` a window's (``TimeWindow(start, end)``)."""
        task = self.task_for(key)
        assert task.timers is not None, "open() the harness first"
        task.backend.set_current_key(key)
        return task.timers.timestamps(TimeDomain(domain), namespace)

    def _check_open(self) -> None:
        if not self._opened or self._closed:
            raise RuntimeError("open() the harness first (or use it as a context manager)")

    def process_all(self, values: Iterable[Any]) -> list[Emitted]:
        return [record for value in values for record in self.process(value)]

    def process_record(self, key: bytes | None, value: bytes | None, *,
                       timestamp_ms: int | None = None, input: int = 0) -> list[Emitted]:
        """Process one Kafka record of input number ``input`` as the worker does: that input's
        ``decode`` (else the stage's), then its ``key_by``. An input with a Spark step is Spark's
        to prepare: :meth:`spark_step_rows`."""
        item = self.stage.input_list[input]
        if self.stage.spark_step_of(item) is not None:
            raise ValueError(f"input {item.topic} of stage {self.stage.name} has a Spark step: run it with "
                             f"spark_step_rows(spark, records) and process the rows")
        decode = self.stage.decode_of(item)
        return self.process(decode(key, value), timestamp_ms=timestamp_ms, input=input)

    def spark_step_rows(self, spark: Any, records: Iterable[bytes | tuple[bytes | None, bytes | None]], *,
                        input: int = 0) -> list[Any]:
        """Input number ``input``'s Spark step run in ``spark`` (a local SparkSession) on
        ``records`` (values, or ``(key, value)`` pairs) as a worker runs it on a micro-batch of
        them: the values the function would get, in the step's order, to :meth:`process` or
        :meth:`process_all`. Rows with a null required column, which a worker dead-letters, are
        left out and kept in :attr:`step_rejected` (the record's value and the null columns)."""
        from tidemark.runtime.job.records import stepped_records
        from tidemark.spark.arrow import SOURCE_SCHEMA
        from tidemark.spark.spark_step import REJECTED, StageSteps

        item = self.stage.input_list[input]
        step = self.stage.spark_step_of(item)
        if step is None:
            raise ValueError(f"input {item.topic} of stage {self.stage.name} has no Spark step")
        steps = StageSteps(self.stage.name, {item.topic: step}, (item.topic,))
        steps.prepare(spark)
        pairs = [r if isinstance(r, tuple) else (None, r) for r in records]
        frame = spark.createDataFrame([(item.topic, 0, offset, None, key, value, None)
                                       for offset, (key, value) in enumerate(pairs)], SOURCE_SCHEMA)
        [stepped] = steps.collect(frame, 0, None).stepped
        values = []
        for record in stepped_records(stepped.table, stepped.row_columns,
                                      REJECTED if step.required else None, stepped.originals):
            if record.step_rejected is not None:
                self.step_rejected.append((record.value, record.step_rejected))
            else:
                values.append(record.row if record.row is not None else self.stage.decode_of(item)(record.key,
                                                                                                  record.value))
        return values

    def output_values(self) -> list[Any]:
        """The values of :attr:`output`, decoded as JSON."""
        return [record.decoded() for record in self.output]

    def side_output(self, tag: OutputTag | str) -> list[Emitted]:
        """What was written to the side output ``tag`` (an :class:`~tidemark.api.OutputTag` or its
        name) so far, in order."""
        name = tag.name if isinstance(tag, OutputTag) else tag
        if name not in self.side_outputs:
            raise KeyError(f"stage {self.stage.name} has no side output {name!r}; its side_outputs: "
                           f"{sorted(self.side_outputs) or 'none'}")
        return self.side_outputs[name]

    def clear_output(self) -> None:
        self.output.clear()
        for records in self.side_outputs.values():
            records.clear()

    # ------------------------------------------------------------------ state

    @property
    def functions(self) -> list[Any]:
        """The function instance of each task, in task order (to look at what a function keeps)."""
        return [task.operator.function for task in self.tasks]  # type: ignore[attr-defined]

    def broadcast_state(self, descriptor: Any) -> list[dict[Any, Any]]:
        """Each task's broadcast state of ``descriptor`` (a
        :class:`~tidemark.state.BroadcastStateDescriptor`), in task order, as dicts."""
        return [dict(task.operator_state.get_broadcast_state(descriptor).items()) for task in self.tasks]

    def task_for(self, key: Any) -> StageTask:
        """The task whose key groups hold ``key``."""
        return self.tasks[self.router.task_index(key)]

    def state(self, descriptor: Any, key: Any, namespace: Any = None) -> Any:
        """The state handle of ``descriptor`` with ``key`` current (on its task's backend), in
        ``namespace`` (a window: ``TimeWindow(start, end)``; default: a function's own state), to
        read (or set up) state: ``harness.state(ValueStateDescriptor("hits", default=0), "/a").value()``.
        The next record sets its own key, so reading here does not disturb processing."""
        backend = self.task_for(key).backend
        backend.set_current_key(key)
        state = backend.get_state(descriptor)
        state.set_current_namespace(namespace)
        return state

    def cleanup_expired_state(self) -> int:
        """Remove every expired TTL entry now (as a full snapshot does; a running task removes
        them a bounded number at a time after each batch and tick, as ``advance_processing_time``
        does here); returns how many."""
        return sum(task.backend.cleanup_expired_state() for task in self.tasks)  # type: ignore[union-attr]

    # ------------------------------------------------------------------ snapshots

    def snapshot(self, checkpoint_id: int | None = None, *, savepoint: bool = True) -> HarnessSnapshot:
        """Snapshot every task into the harness's storage and write its ``_metadata``, as a worker
        does at a barrier (each operator's ``prepare_snapshot_pre_barrier`` first: what it emits
        there is appended to :attr:`output`); processing may go on afterwards. A savepoint (the
        default) is self-contained, in the canonical format; ``savepoint=False`` takes a checkpoint
        in the backend's own form (RocksDB's incremental files, the changelog's ranges)."""
        self._check_open()
        cid = CheckpointId(checkpoint_id if checkpoint_id is not None else self._next_snapshot)
        self._next_snapshot = cid + 1
        kind = CheckpointType.SAVEPOINT if savepoint else CheckpointType.CHECKPOINT
        for task in self.tasks:
            task.prepare_snapshot_pre_barrier(cid)
            self._emitted(task)
        storage = SnapshotStorage(self.storage, checkpoint_dir(self.job_id, cid, kind), shared_dir(self.job_id))
        started = now_ms()
        tasks = []
        for task in self.tasks:
            keyed, operator = task.snapshot(cid, storage, canonical=savepoint, operator_items={}).run()
            assignment = task.assignment
            tasks.append(TaskSnapshot(task.task_id, assignment.operator_id, assignment.subtask_index,
                                      assignment.key_group_start, assignment.key_group_end,
                                      state_handles=keyed.handles + operator, changelog_ranges=keyed.ranges,
                                      materialization=keyed.materialization))
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

    def stop_with_savepoint(self, checkpoint_id: int | None = None) -> HarnessSnapshot:
        """What a stop-with-savepoint does to the tasks: a savepoint, its completion, each
        operator's ``finish``, then :meth:`close`."""
        snapshot = self.snapshot(checkpoint_id)
        self.notify_checkpoint_complete(snapshot.metadata.checkpoint_id)
        for task in self.tasks:
            task.finish()
        self.close()
        return snapshot

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        """Tell every task that checkpoint ``checkpoint_id`` was aborted."""
        self._check_open()
        for task in self.tasks:
            task.notify_aborted(CheckpointId(checkpoint_id))
