"""Builders for checkpoint coordinator tests: registrations, acks, declines, a scripted run."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from tidemark.checkpoint import (
    CheckpointCoordinator,
    CheckpointingOptions,
    Command,
    EmitAborted,
    EmitCompleted,
    EmitRestore,
    EmitTrigger,
    PersistCheckpoint,
    RestoreRequest,
)
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.protocol.messages import (
    CheckpointTrigger,
    JobRegistration,
    SavepointRequest,
    StateFile,
    StateHandle,
    StateHandleKind,
    TaskAck,
    TaskAssignment,
    TaskDecline,
    TaskSnapshot,
    TaskTimings,
)
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    Epoch,
    JobId,
    OperatorId,
    TaskId,
)

JOB = JobId("job")
MAX_P = 128


def registration(
    epoch: int = 0, parallelism: int = 2, at: int = 0, finished: bool = False, job: JobId = JOB
) -> JobRegistration:
    """Two operators, ``src`` (the source) and ``agg``, each with ``parallelism`` subtasks."""
    tasks = plan_assignments((OperatorId("src"), OperatorId("agg")), parallelism, MAX_P)
    return JobRegistration(
        job_id=job,
        epoch=Epoch(epoch),
        mode=CheckpointingMode.EXACTLY_ONCE,
        max_parallelism=MAX_P,
        tasks=tasks,
        source_tasks=tuple(t.task_id for t in tasks if t.operator_id == "src"),
        registered_at=at,
        finished=finished,
    )


def tasks_of(reg: JobRegistration) -> tuple[TaskAssignment, ...]:
    return reg.tasks


def ack(
    checkpoint_id: int, task: TaskAssignment, at: int, epoch: int = 0, job: JobId = JOB,
    shared: str | None = None,
) -> TaskAck:
    """An ack carrying one keyed handle with a private file (and optionally a shared one)."""
    files = [StateFile(f"{job}/chk-{checkpoint_id}/{task.task_id}", 10, "0" * 64)]
    if shared is not None:
        files.append(StateFile(f"{job}/shared/{shared}", 50, "1" * 64, shared=True))
    handle = StateHandle(
        kind=StateHandleKind.KEYED_FULL,
        operator_id=task.operator_id,
        key_group_start=task.key_group_start,
        key_group_end=task.key_group_end,
        files=tuple(files),
        state_size_bytes=100,
        checkpointed_size_bytes=10,
    )
    snapshot = TaskSnapshot(
        task_id=task.task_id,
        operator_id=task.operator_id,
        subtask_index=task.subtask_index,
        key_group_start=task.key_group_start,
        key_group_end=task.key_group_end,
        state_handles=(handle,),
    )
    return TaskAck(
        job_id=job,
        checkpoint_id=CheckpointId(checkpoint_id),
        task=snapshot,
        timings=TaskTimings(alignment_ms=1, sync_ms=2, async_ms=3, processed_bytes=4),
        acked_at=at,
        epoch=Epoch(epoch),
    )


def decline(checkpoint_id: int, task: TaskAssignment, at: int, epoch: int = 0) -> TaskDecline:
    return TaskDecline(JOB, CheckpointId(checkpoint_id), task.task_id, "disk full", at, Epoch(epoch))


def savepoint_request(request_id: str, at: int, stop: bool = False, generation: int | None = None) -> SavepointRequest:
    return SavepointRequest(JOB, request_id, stop, at, generation=generation)


def triggers(commands: list[Command]) -> list[CheckpointTrigger]:
    return [c.trigger for c in commands if isinstance(c, EmitTrigger)]


def records_written(commands: list[Command]) -> list[object]:
    """The control-topic records the service writes for ``commands`` (in order)."""
    out: list[object] = []
    for c in commands:
        if isinstance(c, EmitTrigger):
            out.append(c.trigger)
        elif isinstance(c, EmitCompleted):
            out.append(c.completed)
        elif isinstance(c, EmitAborted):
            out.append(c.aborted)
        elif isinstance(c, EmitRestore):
            out.append(c.restore)
    return out


def ack_all(coord: CheckpointCoordinator, reg: JobRegistration, cid: int, at: int) -> list[Command]:
    """Every task of ``reg`` acks checkpoint ``cid``; the commands of the last ack."""
    commands: list[Command] = []
    for task in reg.tasks:
        commands = coord.apply(ack(cid, task, at, reg.epoch), at)
    return commands


# --------------------------------------------------------------------------- scripted runs


@dataclass
class Step:
    """One input to the coordinator: a tick, a record, or a restore request, at ``now``."""

    now: int
    kind: str  # "tick" | "record" | "restore"
    payload: object = None
    outputs: list[Command] = field(default_factory=list)

    def run(self, coord: CheckpointCoordinator) -> list[Command]:
        if self.kind == "tick":
            return coord.tick(self.now)
        if self.kind == "restore":
            if callable(self.payload):  # built from the coordinator's state when first run
                self.payload = self.payload(coord)
            assert isinstance(self.payload, RestoreRequest)
            return coord.request_restore(self.payload, self.now)
        return coord.apply(self.payload, self.now)  # type: ignore[arg-type]


Reaction = Callable[[Command, int], list[tuple[int, object]]]


def scripted_run(
    options: CheckpointingOptions,
    initial: list[tuple[int, str, object]],
    react: Reaction,
    until: int,
    tick_every: int = 5,
) -> tuple[CheckpointCoordinator, list[Step]]:
    """Run a coordinator on ``initial`` inputs plus ticks, letting ``react`` turn each command
    into future inputs (acks, store confirmations...); returns it and every step it took."""
    coord = CheckpointCoordinator(JOB, options)
    seq = itertools.count()
    queue: list[tuple[int, int, str, object]] = []
    for now, kind, payload in initial:
        heapq.heappush(queue, (now, next(seq), kind, payload))
    for now in range(0, until, tick_every):
        heapq.heappush(queue, (now, next(seq), "tick", None))
    steps: list[Step] = []
    while queue:
        now, _, kind, payload = heapq.heappop(queue)
        step = Step(now, kind, payload)
        step.outputs = step.run(coord)
        steps.append(step)
        for command in step.outputs:
            for at, record in react(command, now):
                heapq.heappush(queue, (at, next(seq), "record", record))
    return coord, steps


def log_of(steps: list[Step]) -> list[object]:
    """The records on the coordinator's topics after ``steps``: inputs and what it wrote."""
    log: list[object] = []
    for step in steps:
        if step.kind == "record":
            log.append(step.payload)
        log.extend(records_written(step.outputs))
    return log


def persist_confirmation(command: Command) -> object | None:
    """The store's answer to a persist command: the metadata, now durable."""
    return command.metadata if isinstance(command, PersistCheckpoint) else None


def task_ids(reg: JobRegistration) -> list[TaskId]:
    return [t.task_id for t in reg.tasks]
