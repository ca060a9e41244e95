"""Ack handling is idempotent: duplicate, late, out-of-order, wrong-epoch and unknown acks
change nothing, and each is classified."""

from __future__ import annotations

from dataclasses import replace

import pytest
from checkpoint_support import JOB, ack, decline, registration

from tidemark.checkpoint import (
    AckOutcome,
    CheckpointCoordinator,
    CheckpointingOptions,
    PendingCheckpoint,
)
from tidemark.protocol.messages import CheckpointTrigger, TaskAssignment
from tidemark.types import (
    CheckpointId,
    CheckpointingMode,
    CheckpointType,
    Epoch,
    JobId,
    OperatorId,
    TaskId,
)

OPTS = CheckpointingOptions(interval_ms=100, max_concurrent=2, tolerable_failures=5)
REG = registration()
T = REG.tasks
GHOST = TaskAssignment(TaskId("ghost#0"), OperatorId("ghost"), 0, 0, 127)  # type: ignore[arg-type]


def clean_inputs() -> list[tuple[str, object, int]]:
    """Two concurrent checkpoints acked out of order; the second one declined by one task."""
    return [
        ("record", REG, 0),
        ("tick", None, 100),  # chk 1
        ("tick", None, 200),  # chk 2
        ("record", ack(2, T[0], 210), 210),  # chk 2 acked before chk 1
        ("record", ack(1, T[3], 211), 211),
        ("record", ack(1, T[1], 212), 212),
        ("record", ack(1, T[0], 213), 213),
        ("record", decline(2, T[2], 214), 214),  # chk 2 aborted
        ("record", ack(1, T[2], 215), 215),  # chk 1 fully acked -> persist
        ("store", 1, 220),  # chk 1 durable -> completed
        ("tick", None, 300),  # chk 3
        ("record", ack(3, T[0], 310), 310),
    ]


def noise_inputs() -> dict[int, list[tuple[object, AckOutcome]]]:
    """Extra acks to inject after clean input ``i``, with the outcome each must have."""
    return {
        3: [(ack(2, T[0], 210), AckOutcome.DUPLICATE),
            (ack(99, T[0], 210), AckOutcome.UNKNOWN),  # never triggered
            (ack(1, GHOST, 210), AckOutcome.UNKNOWN)],  # not a task of the job
        4: [(ack(1, T[3], 211, epoch=7), AckOutcome.UNKNOWN),  # wrong epoch
            (replace(ack(1, T[3], 211), job_id=JobId("other")), AckOutcome.UNKNOWN)],
        7: [(ack(2, T[1], 214), AckOutcome.DISCARDED)],  # late: chk 2 was aborted
        8: [(ack(1, T[2], 215), AckOutcome.DUPLICATE)],  # chk 1 completing
        9: [(ack(1, T[3], 221), AckOutcome.DISCARDED)],  # late: chk 1 completed
        11: [(ack(3, T[0], 311), AckOutcome.DUPLICATE),
             (ack(3, T[1], 312, epoch=1), AckOutcome.UNKNOWN)],
    }


def run(with_noise: bool) -> tuple[list[list[object]], list[AckOutcome], object]:
    coord = CheckpointCoordinator(JOB, OPTS)
    decisions: list[list[object]] = []
    outcomes: list[AckOutcome] = []
    persisted: dict[int, object] = {}
    noise = noise_inputs() if with_noise else {}
    for i, (kind, payload, now) in enumerate(clean_inputs()):
        if kind == "tick":
            commands = coord.tick(now)
        elif kind == "store":
            commands = coord.apply(persisted[payload], now)  # type: ignore[index]
        else:
            commands = coord.apply(payload, now)  # type: ignore[arg-type]
        for c in commands:
            if hasattr(c, "metadata_path") and hasattr(c, "metadata"):
                persisted[c.metadata.checkpoint_id] = c.metadata
        decisions.append(commands)
        for extra, expected in noise.get(i, []):
            result = coord.acknowledge(extra, now)  # type: ignore[arg-type]
            assert result.commands == (), f"noise ack changed decisions: {extra}"
            assert result.outcome is expected, extra
            outcomes.append(result.outcome)
    return decisions, outcomes, coord


def test_noise_acks_leave_every_decision_unchanged() -> None:
    clean, _, clean_coord = run(with_noise=False)
    noisy, outcomes, noisy_coord = run(with_noise=True)
    assert noisy == clean
    assert len(outcomes) == sum(len(v) for v in noise_inputs().values())
    assert noisy_coord.pending_checkpoint_ids == clean_coord.pending_checkpoint_ids == (3,)
    assert noisy_coord.stats() == clean_coord.stats()
    assert noisy_coord.last_completed == clean_coord.last_completed


def test_out_of_order_acks_complete_the_checkpoint_the_same_way() -> None:
    def complete(order: list[int]):
        coord = CheckpointCoordinator(JOB, OPTS)
        coord.apply(REG, 0)
        coord.tick(100)
        commands = []
        for i in order:
            commands = coord.apply(ack(1, T[i], 150), 150)
        return commands

    assert complete([0, 1, 2, 3]) == complete([3, 1, 0, 2]) == complete([2, 3, 1, 0])


@pytest.fixture
def pending() -> PendingCheckpoint:
    trigger = CheckpointTrigger(JOB, CheckpointId(1), CheckpointType.CHECKPOINT,
                                CheckpointingMode.EXACTLY_ONCE, 100, Epoch(0))
    return PendingCheckpoint(trigger, frozenset(t.task_id for t in T[:2]), 128)


def test_pending_checkpoint_outcomes(pending: PendingCheckpoint) -> None:
    assert pending.acknowledge(ack(1, T[0], 110)) is AckOutcome.SUCCESS
    assert pending.acknowledge(ack(1, T[0], 111)) is AckOutcome.DUPLICATE
    assert pending.acknowledge(ack(1, T[2], 112)) is AckOutcome.UNKNOWN  # not expected here
    assert pending.acknowledge(ack(2, T[1], 113)) is AckOutcome.UNKNOWN  # other checkpoint
    assert pending.acknowledge(ack(1, T[1], 114, epoch=3)) is AckOutcome.UNKNOWN
    assert not pending.is_fully_acknowledged
    assert pending.decline(decline(1, T[1], 115))
    assert not pending.decline(decline(1, T[0], 116))  # only the first decline counts
    assert pending.acknowledge(ack(1, T[1], 117)) is AckOutcome.DISCARDED
    with pytest.raises(ValueError):
        pending.finalize()


def test_pending_checkpoint_finalizes_deterministically(pending: PendingCheckpoint) -> None:
    pending.acknowledge(ack(1, T[1], 130))
    pending.acknowledge(ack(1, T[0], 120))
    completed = pending.finalize()
    assert [t.task_id for t in completed.metadata.tasks] == sorted([T[0].task_id, T[1].task_id])
    assert completed.metadata.completed_at == 130 and not completed.durable
    assert set(completed.timings) == {T[0].task_id, T[1].task_id}
