"""Results of feeding an ack to a pending checkpoint, and why checkpoints are aborted."""

from __future__ import annotations

import enum


class AckOutcome(str, enum.Enum):
    """What an ack did (Flink: PendingCheckpoint.TaskAcknowledgeResult).

    Only ``SUCCESS`` changes state; the other three are no-ops by construction.
    """

    SUCCESS = "SUCCESS"  # first ack of an expected task for a pending checkpoint
    DUPLICATE = "DUPLICATE"  # this task already acked this checkpoint
    UNKNOWN = "UNKNOWN"  # not a task of this checkpoint, wrong job/epoch, or never triggered
    DISCARDED = "DISCARDED"  # the checkpoint was already aborted or completed


DECLINED_SUBSUMED = "CHECKPOINT_DECLINED_SUBSUMED"
"""Prefix of a ``TaskDecline`` reason when a newer checkpoint's barrier overtook the task's
alignment (Flink's CHECKPOINT_DECLINED_SUBSUMED): the checkpoint aborts as ``SUBSUMED``, which
is not the job's failure and uses up no tolerance."""


class AbortReason(str, enum.Enum):
    """Why a checkpoint was aborted; carried as the prefix of ``CheckpointAborted.reason``.

    The prefix is what lets a restarted coordinator re-count failures from the control topic.
    """

    TIMEOUT = "TIMEOUT"
    DECLINED = "DECLINED"
    STORE_REJECTED = "STORE_REJECTED"  # the checkpoint-store could not make it durable
    SUPERSEDED = "SUPERSEDED"  # a newer job attempt (epoch) or a restore replaced the tasks
    SUBSUMED = "SUBSUMED"  # a newer checkpoint completed first
    JOB_FINISHED = "JOB_FINISHED"
    SUPERVISOR_SILENT = "SUPERVISOR_SILENT"  # the job's supervisor fell silent: no task will ack
    UNKNOWN = "UNKNOWN"  # a reason written by someone else

    @property
    def counts_as_failure(self) -> bool:
        """Whether a checkpoint (not savepoint) aborted for this reason uses up a tolerance."""
        return self in (AbortReason.TIMEOUT, AbortReason.DECLINED, AbortReason.STORE_REJECTED)

    def describe(self, detail: str = "") -> str:
        """The wire form ``"<REASON>: <detail>"`` (or just the reason)."""
        return f"{self.value}: {detail}" if detail else self.value

    @classmethod
    def parse(cls, text: str) -> AbortReason:
        """Inverse of :meth:`describe`; anything unrecognised is ``UNKNOWN``."""
        head = text.split(":", 1)[0].strip()
        try:
            return cls(head)
        except ValueError:
            return cls.UNKNOWN
