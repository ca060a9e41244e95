"""The operator lifecycle (Flink's ``StreamOperator``): the one interface every operator of a
stage's task implements, and the contexts the runtime hands it.

The runtime calls an operator in this order, and in no other:

1. ``initialize_state(context)``, once: the operator registers its state; ``context`` says
   whether the task was restored (:meth:`StateInitializationContext.is_restored`, the
   checkpoint or savepoint's id) and gives the keyed state backend (the stage's key groups of
   this task, ``None`` in a stage without a key), the operator state store and the timer
   service manager. Restored state is already in both stores.
2. ``open()``, once.
3. Any number of ``process_element(value, key, timestamp_ms)`` (with ``key`` current in the
   keyed state backend), ``process_watermark(watermark_ms)`` (event time moved: due event-time
   timers fire) and ``on_processing_time(time_ms)`` (the wall clock moved: due processing-time
   timers fire), interleaved with checkpoints; each checkpoint is
   ``prepare_snapshot_pre_barrier(checkpoint_id)`` (before the barrier goes downstream: what
   the operator emits here belongs to the checkpoint) then ``snapshot_state(context)`` (the
   operator puts what it holds outside its stores into them; the runtime then snapshots both
   stores), and later ``notify_checkpoint_complete(checkpoint_id)`` or
   ``notify_checkpoint_aborted(checkpoint_id)`` (a later checkpoint may be snapshotted before
   an earlier one's notification arrives; a checkpoint taken but never notified is neither).
4. ``finish()`` when the task ends gracefully: its stop-with-savepoint completed, nothing more
   comes in, and the output of the savepoint is committed (so ``finish`` must not emit).
5. ``close()``, always, last: also after a failure (then without ``finish``), and also when
   ``initialize_state`` or ``open`` raised.

A failover is a new operator object in a new attempt: ``initialize_state`` with the restored
checkpoint's id, and so on from 1. What the operator emits goes to its :attr:`output` (the
task's records to the stage's output, as ``(key bytes, value bytes, timestamp)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from tidemark.state import KeyedStateBackend, OperatorStateBackend
from tidemark.types import CheckpointId

if TYPE_CHECKING:
    from tidemark.operators.time import StageTime, TimerServiceManager

OutputRecord = tuple[bytes | None, bytes, int]
"""One record an operator emits: key and value as written to Kafka, and its event time."""


class SideRecord(NamedTuple):
    """One record an operator emits to a side output (``ctx.output``): the side output's name,
    then what an :data:`OutputRecord` holds. It goes into the operator's output list with the
    others, so a record or timer that fails takes back what it wrote to side outputs too."""

    side: str
    key: bytes | None
    value: bytes
    timestamp_ms: int


def split_side_records(records: list[Any]) -> tuple[list[OutputRecord], dict[str, list[OutputRecord]]]:
    """``records`` of an operator's output list: those to the stage's output, and those to each
    side output by name, each in order."""
    main: list[OutputRecord] = []
    sides: dict[str, list[OutputRecord]] = {}
    for record in records:
        if type(record) is SideRecord:
            sides.setdefault(record.side, []).append(record[1:])
        else:
            main.append(record)
    return main, sides


@dataclass(frozen=True)
class StateInitializationContext:
    """What ``initialize_state`` gets (Flink's ``StateInitializationContext``)."""

    restored_checkpoint_id: CheckpointId | None
    """The checkpoint or savepoint the task's state was restored from; None on a fresh start."""
    keyed_state_backend: KeyedStateBackend | None
    """The task's keyed state (its key groups); None in a stage without a key."""
    operator_state_store: OperatorStateBackend
    """The task's operator state: even-split lists, union lists and broadcast maps."""
    timer_service_manager: TimerServiceManager | None
    """The task's timers (keyed state, so None in a stage without a key)."""
    time: StageTime | None = None
    """The stage's watermark and clock, which the worker's tasks share."""

    def is_restored(self) -> bool:
        return self.restored_checkpoint_id is not None


@dataclass(frozen=True, slots=True)
class StateSnapshotContext:
    """What ``snapshot_state`` gets (Flink's ``StateSnapshotContext``)."""

    checkpoint_id: int
    checkpoint_timestamp_ms: int


class StreamOperator(ABC):
    """One operator of a task's chain; see the module for the order of the calls. Every method
    but :meth:`process_element` has a default that does nothing."""

    output: list[OutputRecord]
    """Where the operator emits (the chain gives it at :meth:`setup`)."""

    judges_lateness = False
    """False: a record behind the watermark never reaches the operator (the stage's late-record
    policy takes it first). True: it does, and ``process_element`` returns False for one that is
    too late (the window operator, whose windows take records up to their allowed lateness)."""

    def setup(self, output: list[OutputRecord]) -> None:
        """Before ``initialize_state``: where the operator's records go."""
        self.output = output

    def initialize_state(self, context: StateInitializationContext) -> None:  # noqa: B027 - optional hook
        pass

    def open(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    def process_element(self, value: Any, key: Any, timestamp_ms: int) -> bool | None:
        """One record of the stage's first input (or its only one), its key current in the keyed
        state backend (in a keyed stage). Returns False only for a record too late to process
        (see :attr:`judges_lateness`)."""

    def process_element2(self, value: Any, key: Any, timestamp_ms: int) -> bool | None:
        """One record of the stage's second input or a later one (Flink's
        ``TwoInputStreamOperator.processElement2``); an operator over one input takes it as any."""
        return self.process_element(value, key, timestamp_ms)

    def process_watermark(self, watermark_ms: int) -> None:  # noqa: B027 - optional hook
        """Event time reached ``watermark_ms``: no record at or before it comes any more."""

    def on_processing_time(self, time_ms: int) -> None:  # noqa: B027 - optional hook
        """The wall clock reached ``time_ms`` (called between micro-batches)."""

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        pass

    def snapshot_state(self, context: StateSnapshotContext) -> None:  # noqa: B027 - optional hook
        pass

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        pass

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027 - optional hook
        pass

    def finish(self) -> None:  # noqa: B027 - optional hook
        pass

    def close(self) -> None:  # noqa: B027 - optional hook
        pass
