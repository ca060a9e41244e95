"""A triggered checkpoint collecting acks (Flink: PendingCheckpoint).

Lifecycle: created from a ``CheckpointTrigger`` with the set of tasks that must ack; receives
acks (``acknowledge``) and at most one decline (``decline``); once ``is_fully_acknowledged`` it
is turned into a :class:`CompletedCheckpoint` by ``finalize`` and dropped. A pending checkpoint
never reopens: after a decline every further ack is ``DISCARDED``.
"""

from __future__ import annotations

from tidemark.checkpoint.completed import CompletedCheckpoint
from tidemark.checkpoint.outcomes import AckOutcome
from tidemark.protocol.messages import CheckpointMetadata, CheckpointTrigger, TaskAck, TaskDecline
from tidemark.types import CheckpointId, CheckpointType, Epoch, TaskId


class PendingCheckpoint:
    """Acks collected so far for one checkpoint or savepoint of one job attempt."""

    __slots__ = ("trigger", "tasks_to_ack", "max_parallelism", "_acks", "_decline")

    def __init__(
        self, trigger: CheckpointTrigger, tasks_to_ack: frozenset[TaskId], max_parallelism: int
    ) -> None:
        if not tasks_to_ack:
            raise ValueError("a checkpoint needs at least one task to acknowledge it")
        self.trigger = trigger
        self.tasks_to_ack = tasks_to_ack
        self.max_parallelism = max_parallelism
        self._acks: dict[TaskId, TaskAck] = {}
        self._decline: TaskDecline | None = None

    @property
    def checkpoint_id(self) -> CheckpointId:
        return self.trigger.checkpoint_id

    @property
    def checkpoint_type(self) -> CheckpointType:
        return self.trigger.checkpoint_type

    @property
    def epoch(self) -> Epoch:
        return self.trigger.epoch

    @property
    def triggered_at(self) -> int:
        return self.trigger.triggered_at

    @property
    def acks(self) -> tuple[TaskAck, ...]:
        """Acks in task-id order (deterministic)."""
        return tuple(self._acks[t] for t in sorted(self._acks))

    @property
    def declined(self) -> TaskDecline | None:
        return self._decline

    @property
    def is_fully_acknowledged(self) -> bool:
        return self._decline is None and len(self._acks) == len(self.tasks_to_ack)

    def acknowledge(self, ack: TaskAck) -> AckOutcome:
        """Record ``ack``; only ``SUCCESS`` changes anything."""
        task = ack.task.task_id
        if ack.checkpoint_id != self.checkpoint_id or ack.epoch != self.epoch:
            return AckOutcome.UNKNOWN
        if task not in self.tasks_to_ack:
            return AckOutcome.UNKNOWN
        if self._decline is not None:
            return AckOutcome.DISCARDED
        if task in self._acks:
            return AckOutcome.DUPLICATE
        self._acks[task] = ack
        return AckOutcome.SUCCESS

    def decline(self, decline: TaskDecline) -> bool:
        """Record the first decline of an expected task; True when it was recorded."""
        if decline.checkpoint_id != self.checkpoint_id or decline.epoch != self.epoch:
            return False
        if decline.task_id not in self.tasks_to_ack or self._decline is not None:
            return False
        self._decline = decline
        return True

    def finalize(self) -> CompletedCheckpoint:
        """The completed (not yet durable) checkpoint; requires every ack.

        ``completed_at`` is the latest ack time, so replaying the same acks gives the same value.
        """
        if not self.is_fully_acknowledged:
            raise ValueError(f"checkpoint {self.checkpoint_id} is not fully acknowledged")
        acks = self.acks
        handles = [h for a in acks for h in a.task.state_handles]
        metadata = CheckpointMetadata(
            job_id=self.trigger.job_id,
            checkpoint_id=self.checkpoint_id,
            checkpoint_type=self.checkpoint_type,
            triggered_at=self.triggered_at,
            completed_at=max([self.triggered_at, *(a.acked_at for a in acks)]),
            max_parallelism=self.max_parallelism,
            tasks=tuple(a.task for a in acks),
            epoch=self.epoch,
            state_size_bytes=sum(h.state_size_bytes for h in handles),
            checkpointed_size_bytes=sum(h.checkpointed_size_bytes for h in handles),
        )
        timings = {a.task.task_id: a.timings for a in acks}
        return CompletedCheckpoint(metadata=metadata, timings=timings)
