"""One parallel task of a stage: a key-group range, its state and the operator that runs the
user function on it.

Lifecycle: ``StageTask(...)`` -> ``restore(...)`` at most once -> ``open()`` (the operator's
``initialize_state`` with the restored checkpoint's id, then its ``open``) -> ``process(...)``
per record routed here, ``fire(domain, time)`` whenever the stage's watermark or the wall clock
moves (the operator's ``process_watermark`` / ``on_processing_time``) ->
``prepare_snapshot_pre_barrier(...)`` and ``snapshot(...)`` at each checkpoint (the operator's
``snapshot_state``, then the synchronous parts of the keyed and operator state backends'
snapshots; the returned asynchronous part writes them, on any thread) -> ``notify_completed`` /
``notify_aborted`` as checkpoints end -> ``finish()`` when a stop-with-savepoint completed ->
``close()`` always. This is the operator lifecycle of :mod:`tidemark.operators.lifecycle`; the
operator is a :class:`~tidemark.operators.keyed_process.KeyedProcessOperator` over the stage's
function, or a :class:`~tidemark.operators.keyed_process.ProcessOperator` in a stage without a key
(no keyed state or timers: its keyed backend stays empty, so its snapshots look like any other
task's). A task never sees a key outside its key groups (the router guarantees it; the backend
checks it).

What the operator emits collects in :attr:`StageTask.output` until the worker takes it
(:meth:`StageTask.take_output`) for the stage's output. Timers are the task's keyed state
(:class:`~tidemark.operators.time.TimerServiceManager`); the stage's watermark and clock come
from :class:`~tidemark.operators.time.StageTime`, shared by the worker's tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tidemark.clock import now_ms
from tidemark.keygroups import KeyGroupRange
from tidemark.operators.keyed_process import KeyedProcessOperator, ProcessOperator
from tidemark.operators.window import WindowOperator
from tidemark.operators.lifecycle import OutputRecord, StateInitializationContext, StateSnapshotContext, StreamOperator
from tidemark.operators.time import StageTime, TimerServiceManager
from tidemark.protocol.messages import MaterializationEvent, StateHandle, TaskAssignment
from tidemark.api import Stage
from tidemark.state import KeyedSnapshot, KeyedStateBackend, ListStateDescriptor, OperatorStateBackend
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.timers import TimeDomain, Timer
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, TaskId

TimerFailed = Callable[[Timer, Exception], None]
CLEANUP_SLOTS = 2000  # stored values a task checks for expired TTL after each batch and tick (about 2 ms)
OperatorFactory = Callable[[Stage, TimerFailed | None], StreamOperator]
"""Makes a task's operator for its stage: by default :class:`WindowOperator` in a windowed stage,
:class:`KeyedProcessOperator` in another keyed stage, :class:`ProcessOperator` in one without a key."""


class StageTask:
    def __init__(self, stage: Stage, assignment: TaskAssignment, parallelism: int,
                 backend: KeyedStateBackend, time: StageTime | None = None,
                 timer_failed: TimerFailed | None = None, operator: OperatorFactory | None = None) -> None:
        self.stage = stage
        self.assignment = assignment
        self.task_id: TaskId = assignment.task_id
        self.backend = backend
        self.operator_state = OperatorStateBackend(operator_id=stage.name, subtask_index=assignment.subtask_index,
                                                   parallelism=parallelism)
        self.keyed = stage.keyed
        if operator is None:
            operator = (WindowOperator if stage.window is not None else KeyedProcessOperator if self.keyed
                        else ProcessOperator)
        self.operator: StreamOperator = operator(stage, timer_failed)
        self.output: list[OutputRecord] = []
        """What the operator emitted since the worker last took it (:meth:`take_output`)."""
        self.operator.setup(self.output)
        self.time = time or StageTime()
        self.timers: TimerServiceManager | None = None  # from open(): after the restore
        self.records_in = 0  # records processed since the worker last counted them
        self.restored_checkpoint_id: CheckpointId | None = None  # restore(): where the state came from
        self._process = self.operator.process_element
        self._process2 = self.operator.process_element2
        self._broadcast_side = stage.broadcast_side  # its elements come to every task, without a key

    @property
    def key_groups(self) -> KeyGroupRange:
        return self.backend.key_group_range

    def restore(self, keyed: Sequence[KeyedSnapshot], operator: Sequence[StateHandle],
                storage: CheckpointStorage, checkpoint_id: CheckpointId) -> None:
        """Keyed state from the old tasks' keyed snapshots overlapping this task's key groups
        (the backend keeps only its own), then operator state from ``operator``, all of checkpoint
        (or savepoint) ``checkpoint_id``."""
        self.restored_checkpoint_id = checkpoint_id
        if keyed:
            self.backend.restore(keyed, storage)
        if operator:
            self.operator_state.restore(operator, storage)

    def restored_items(self, descriptor: ListStateDescriptor) -> list[bytes]:
        return list(self.operator_state.get_union_list_state(descriptor).get())

    def open(self) -> None:
        """The operator's ``initialize_state`` (the restored state is in the stores), then ``open``."""
        if self.keyed:
            self.timers = TimerServiceManager(self.backend, self.time)
        self.operator.initialize_state(StateInitializationContext(
            self.restored_checkpoint_id, self.backend if self.keyed else None, self.operator_state, self.timers,
            self.time))
        self.operator.open()

    def process(self, key: Any, value: Any, timestamp_ms: int, side: int = 0) -> bool | None:
        """One record of the stage's input number ``side``, into :attr:`output`; a record whose
        function raises emits nothing (and the error propagates: the stage's error policy takes
        it). False: the operator found the record too late (``StreamOperator.judges_lateness``)."""
        if self.keyed and side != self._broadcast_side:
            self.backend.set_current_key(key)
        emitted = len(self.output)
        try:
            taken = (self._process2 if side else self._process)(value, key, timestamp_ms)
        except Exception:
            del self.output[emitted:]
            raise
        self.records_in += 1
        return taken

    def take_output(self) -> list[OutputRecord]:
        """What the operator emitted since the last call, in order."""
        records = self.output[:]
        self.output.clear()
        return records

    def due(self, domain: TimeDomain, time: int) -> bool:
        """True when a timer of ``domain`` is due at ``time`` (never in a stage without a key)."""
        return self.timers is not None and self.timers.due(domain, time)

    def fire(self, domain: TimeDomain, time: int) -> None:
        """Time of ``domain`` reached ``time``: the operator fires the timers due (their records
        into :attr:`output`)."""
        if domain is TimeDomain.EVENT_TIME:
            self.operator.process_watermark(time)
        else:
            self.operator.on_processing_time(time)

    def clean_up_expired(self) -> int:
        """The task's share of TTL cleanup after a batch or a tick: the next
        ``CLEANUP_SLOTS`` stored values of its keyed state, from where the last call stopped,
        lose what has expired (so keys that are never read again do not stay in the state and its
        checkpoints for ever); how many changed."""
        return self.backend.cleanup_expired_state(CLEANUP_SLOTS) if self.keyed else 0

    def pending_timers(self, domain: TimeDomain) -> int:
        return self.timers.pending(domain) if self.timers is not None else 0

    def prepare_snapshot_pre_barrier(self, checkpoint_id: CheckpointId) -> None:
        """Before the barrier goes downstream: what the operator emits now belongs to the checkpoint."""
        self.operator.prepare_snapshot_pre_barrier(int(checkpoint_id))

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *, canonical: bool,
                 operator_items: dict[ListStateDescriptor, list[bytes]]
                 ) -> AsyncSnapshot[tuple[KeyedSnapshot, tuple[StateHandle, ...]]]:
        """The operator's ``snapshot_state``, then the synchronous parts of the snapshots of keyed
        state and of operator state (holding ``operator_items``, the runtime's union list states,
        and the function's); the result's ``run`` writes both (:mod:`tidemark.state.async_snapshot`).
        ``canonical`` (savepoints): a self-contained full snapshot in the canonical format."""
        self.operator.snapshot_state(StateSnapshotContext(int(checkpoint_id), now_ms()))
        for descriptor, items in operator_items.items():
            self.operator_state.get_union_list_state(descriptor).update(items)
        keyed = self.backend.snapshot_async(checkpoint_id, storage, canonical=canonical)
        try:
            operator = self.operator_state.snapshot_async(checkpoint_id, storage)
        except BaseException:
            keyed.release()
            raise
        return AsyncSnapshot(lambda: (keyed.run(), tuple(operator.run())),
                             lambda: (keyed.release(), operator.release()))

    def notify_completed(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_complete(checkpoint_id)
        self.operator.notify_checkpoint_complete(int(checkpoint_id))

    def notify_aborted(self, checkpoint_id: CheckpointId) -> None:
        self.backend.notify_checkpoint_aborted(checkpoint_id)
        self.operator.notify_checkpoint_aborted(int(checkpoint_id))

    def on_materialization(self, event: MaterializationEvent) -> None:
        self.backend.notify_materialization(event)

    def finish(self) -> None:
        """The task ended gracefully (its stop-with-savepoint completed): the operator's ``finish``."""
        self.operator.finish()

    def close(self) -> None:
        try:
            self.operator.close()
        finally:
            self.backend.close()
            self.operator_state.close()
