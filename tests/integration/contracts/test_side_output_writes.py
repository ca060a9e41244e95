"""Side outputs (``WithSideOutputs``, ``runtime/worker/outputs.py``) against the session broker:
a stage's output and its side outputs driven as one output, each side output committed as the
stage's output is (exactly-once: its own write-ahead buffers, transactional id and commit
markers; at-least-once: written at once), read back by real consumers.

The contract of each output kind is ``test_output_contract.py``'s; here, what the composition adds:
records go where their operator sent them, nothing of an exactly-once side output is visible
before the completed notification, the buffers of every output share the operator state and a
recovery commits each output's own lost buffers once, and a checkpoint already committed writes
nothing again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidemark.broker.engine import tansu_selected
from tidemark.operators.lifecycle import SideRecord
from tidemark.protocol.messages import BARRIER_HEADER, Barrier
from tidemark.runtime.worker.outputs import (
    AtLeastOnceOutput,
    ChannelOutput,
    PendingBuffer,
    StageOutput,
    TwoPhaseCommitOutput,
    WithSideOutputs,
)
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, OperatorId, TaskId

JOB = JobId("job")
OPERATOR = OperatorId("rules")
TASKS = (TaskId("rules#0"), TaskId("rules#1"))


def _batch(tag: str) -> dict[TaskId, list[Any]]:
    """Per task: two records to the output and one to each side output, interleaved as a function
    emits them."""
    return {task: [(b"k", f"{tag}/{task}/main/0".encode(), 1),
                   SideRecord("alerts", b"k", f"{tag}/{task}/alerts".encode(), 1),
                   (b"k", f"{tag}/{task}/main/1".encode(), 1),
                   SideRecord("audit", None, f"{tag}/{task}/audit".encode(), 1)] for task in TASKS}


def _sent(batch: dict[TaskId, list[Any]], side: str = "") -> list[bytes]:
    return [r[2] if isinstance(r, SideRecord) else r[1] for records in batch.values() for r in records
            if (r.side if isinstance(r, SideRecord) else "") == side]


def _barriers(checkpoint_id: int) -> dict[TaskId, Barrier]:
    return {task: Barrier(JOB, CheckpointId(checkpoint_id), CheckpointType.CHECKPOINT, CheckpointingMode.EXACTLY_ONCE,
                          task, 1_000 * checkpoint_id, Epoch(1)) for task in TASKS}


@pytest.fixture
def stage_outputs(client: dict[str, Any], new_topic: Callable[[str, int], str],
                  unique_name: Callable[[str], str]) -> Iterator[Callable[..., tuple[dict[str, str], Callable]]]:
    """``stage_outputs(main=..., sides=...)`` -> (topic of "" and each side output, attempt(n)):
    a stage attempt's ``WithSideOutputs`` over new topics, the same transactional ids each attempt."""
    opened: list[StageOutput] = []

    def make(main: str = "two-phase-commit", sides: str = "two-phase-commit"):
        topics = {"": new_topic("out", 1), "alerts": new_topic("alerts", 1), "audit": new_topic("audit", 1)}
        txid, markers = unique_name("txn"), unique_name("sink-commits")

        def output(side: str, kind: str, epoch: int) -> StageOutput:
            """Started: the attempt before fenced, as by a worker's first use of its output."""
            if kind == "channel":
                channel = ChannelOutput(client, topics[side], 1, txid, Epoch(epoch))
                channel.started()
                return channel
            if kind == "two-phase-commit":
                sink = TwoPhaseCommitOutput(client, topics[side], JOB, OPERATOR, f"{txid}.side.{side}" if side else txid,
                                            markers, hold_until_commit=tansu_selected(), side=side)
                sink.started()
                return sink
            return AtLeastOnceOutput(client, topics[side])

        def attempt(epoch: int) -> WithSideOutputs:
            composed = WithSideOutputs(output("", main, epoch), {s: output(s, sides, epoch) for s in ("alerts", "audit")})
            opened.append(composed)
            return composed

        return topics, attempt

    yield make
    for output in opened:
        output.close()


def _data(records: list[Any]) -> list[bytes]:
    return [r.value for r in records if BARRIER_HEADER not in r.headers]


def test_each_record_reaches_its_own_output_exactly_once_at_the_completed_notification(
        stage_outputs, read_topic, end_offsets) -> None:
    topics, attempt = stage_outputs()
    output = attempt(1)
    output.recover([], CheckpointId(0))
    batch = _batch("b1")
    output.write(batch)
    state = output.pre_commit(_barriers(1))
    assert all(end_offsets(topic) == 0 for topic in topics.values()), "records left the client before the commit"
    for task in TASKS:  # one buffer per output and task, each naming its output
        buffers = sorted(map(PendingBuffer.decode, state[task]), key=lambda b: b.output)
        assert [(b.task, b.output, len(b.records)) for b in buffers] == [(task, "", 2), (task, "alerts", 1),
                                                                          (task, "audit", 1)]
    output.commit(CheckpointId(1))
    for side, topic in topics.items():
        assert sorted(_data(read_topic(topic, "read_committed", len(_sent(batch, side))))) == sorted(_sent(batch, side))
    assert output.records_out == 8


def test_a_recovery_commits_each_outputs_lost_buffers_once_and_a_committed_checkpoint_not_again(
        stage_outputs, read_topic) -> None:
    topics, attempt = stage_outputs()
    first = attempt(1)
    one, two = _batch("b1"), _batch("b2")
    first.write(one)
    items = [item for items in first.pre_commit(_barriers(1)).values() for item in items]
    first.commit(CheckpointId(1))
    first.write(two)
    items_2 = [item for items in first.pre_commit(_barriers(2)).values() for item in items]
    # checkpoint 2 completed, the attempt died before its notification: the next restores checkpoint 2
    second = attempt(2)
    second.recover(items_2, CheckpointId(2))
    # and a third attempt restores it again: every output's markers show it committed now
    third = attempt(3)
    third.recover(items_2, CheckpointId(2))
    assert third.records_out == 0
    assert len(items) == 6 and len(items_2) == 6  # checkpoint 1's buffers were committed, not carried on
    for side, topic in topics.items():
        expected = _sent(one, side) + _sent(two, side)
        assert sorted(_data(read_topic(topic, "read_committed", len(expected)))) == sorted(expected), side


def test_side_outputs_of_a_channel_stage_commit_while_the_channel_gets_records_and_barriers(
        stage_outputs, read_topic) -> None:
    topics, attempt = stage_outputs(main="channel")
    output = attempt(1)
    batch = _batch("b1")
    output.write(batch)
    assert sorted(_data(read_topic(topics[""], "read_committed", 4))) == sorted(_sent(batch))  # at once
    state = output.pre_commit(_barriers(1))
    assert {b.output for items in state.values() for b in map(PendingBuffer.decode, items)} == {"alerts", "audit"}
    assert len(read_topic(topics[""], "read_committed", 6)) == 6  # and a barrier per task
    output.commit(CheckpointId(1))
    for side in ("alerts", "audit"):
        assert sorted(_data(read_topic(topics[side], "read_committed", 2))) == sorted(_sent(batch, side))


def test_at_least_once_side_outputs_are_delivered_by_the_checkpoint(stage_outputs, read_topic) -> None:
    topics, attempt = stage_outputs(main="at-least-once", sides="at-least-once")
    output = attempt(1)
    batch = _batch("b1")
    output.write(batch)
    assert output.pre_commit(_barriers(1)) == {}
    for side, topic in topics.items():  # delivered when pre_commit returns, before any commit
        assert sorted(_data(read_topic(topic, "read_uncommitted", len(_sent(batch, side))))) == sorted(_sent(batch, side))
