"""One contract suite for every ``StageOutput``: ``ChannelOutput``, ``TwoPhaseCommitOutput`` and
``AtLeastOnceOutput``, against the session broker, read back by real consumers.

The lifecycle every output offers the stage worker (``runtime/worker/outputs.py``): ``recover(items, n)``
after a restore -> ``write(batch)`` per micro-batch -> ``pre_commit(barriers)`` at checkpoint *n*,
whose result is the operator state snapshotted with it -> ``commit(n)`` / ``abort(n)`` -> ``close()``.

Where the guarantees differ by design, ``DECLARED`` states each output's documented guarantee
(module docstring of ``outputs.py``, docs/concepts/runtime.md) and the tests assert accordingly:

* the channel writes each micro-batch as one transaction (visible at once to read_committed),
  tags records with the attempt's epoch and the task, and writes one barrier per task into every
  partition after the checkpoint's data; a failed attempt's records stay, told apart by epoch;
* the two-phase-commit output (exactly-once) keeps results in write-ahead buffers that are the
  operator state, writes nothing before the completed notification, then commits every buffer up
  to it in one transaction; an aborted checkpoint's buffer waits for the next completed one;
* the at-least-once output writes at once and has everything delivered when ``pre_commit``
  returns; after a failure, results since the last completed checkpoint may be written twice.

The last tests run one stage's two-phase-commit output as several workers (each its own
``TwoPhaseCommitOutput``, transactional id and tasks): each commits on its own, with one commit
marker per task, and a recovery commits exactly the buffers whose own task's marker is missing.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer

from tidemark.broker.engine import tansu_selected
from tidemark.kafka.clients import producer_config
from tidemark.kafka.commit_markers import CommitMarker
from tidemark.kafka.transactions import fence_transactional_ids
from tidemark.protocol import codec
from tidemark.protocol.messages import BARRIER_HEADER, Barrier
from tidemark.runtime.worker.outputs import (
    AtLeastOnceOutput,
    ChannelOutput,
    OutputRecord,
    PendingBuffer,
    StageOutput,
    TwoPhaseCommitOutput,
    task_commit_markers,
)
from tidemark.runtime.job.records import EPOCH_HEADER, TASK_HEADER
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, OperatorId, TaskId

JOB = JobId("job")
TASKS = (TaskId("sink#0"), TaskId("sink#1"))


@dataclass(frozen=True, slots=True)
class Declared:
    """What an output promises, as documented."""

    guarantee: str
    visible_at: str  # the first lifecycle step after which read_committed readers see a batch
    snapshots_buffers: bool  # pre_commit returns the pending results as operator state
    writes_barriers: bool  # pre_commit appends barriers after the data in every partition
    tags_records: bool  # records carry the writer's epoch and task headers
    held_back: bool  # nothing reaches the broker before the declared step
    failed_attempt: str  # what read_committed readers see of a batch an attempt wrote and
    # then failed before its checkpoint, written again by the next attempt:
    # "once", "once per epoch" or "at least once"


DECLARED = {
    "channel": Declared("each micro-batch atomic; failed attempts dropped by epoch", "write",
                        snapshots_buffers=False, writes_barriers=True, tags_records=True,
                        held_back=False, failed_attempt="once per epoch"),
    "two-phase-commit": Declared("exactly-once", "commit", snapshots_buffers=True, writes_barriers=False,
                                 tags_records=False, held_back=True, failed_attempt="once"),
    "at-least-once": Declared("at-least-once", "pre_commit", snapshots_buffers=False, writes_barriers=False,
                              tags_records=False, held_back=False, failed_attempt="at least once"),
}
STEPS = ("write", "pre_commit", "commit")


@dataclass
class OutputUnderTest:
    kind: str
    declared: Declared
    topic: str
    attempt: Callable[[int], StageOutput]  # a stage attempt's output (same transactional id)


@pytest.fixture(params=list(DECLARED))
def make_output(request: pytest.FixtureRequest, client: dict[str, Any], new_topic: Callable[[str, int], str],
                unique_name: Callable[[str], str]) -> Iterator[Callable[[int], OutputUnderTest]]:
    kind: str = request.param
    opened: list[StageOutput] = []

    def make(partitions: int = 1) -> OutputUnderTest:
        topic = new_topic("out", partitions)
        txid = unique_name("txn")
        markers = unique_name("sink-commits")

        def attempt(number: int) -> StageOutput:
            output: StageOutput
            if kind == "channel":
                output = ChannelOutput(client, topic, partitions, txid, Epoch(number))
            elif kind == "two-phase-commit":
                output = TwoPhaseCommitOutput(client, topic, JOB, OperatorId("sink"), txid, markers,
                                              hold_until_commit=tansu_selected())
            else:
                output = AtLeastOnceOutput(client, topic)
            opened.append(output)
            if isinstance(output, (ChannelOutput, TwoPhaseCommitOutput)):
                output.started()  # the attempt before fenced, as by a worker's first use of its output
            return output

        return OutputUnderTest(kind, DECLARED[kind], topic, attempt)

    yield make
    for output in opened:
        output.close()


def _batch(tag: str, per_task: int = 3, tasks: tuple[TaskId, ...] = TASKS) -> dict[TaskId, list[OutputRecord]]:
    return {task: [(f"k{i}".encode(), f"{tag}/{task}/{i}".encode()) for i in range(per_task)] for task in tasks}


def _values(batch: dict[TaskId, list[OutputRecord]]) -> list[bytes]:
    return [value for records in batch.values() for _, value in records]


def _barriers(checkpoint_id: int, epoch: int = 1, tasks: tuple[TaskId, ...] = TASKS) -> dict[TaskId, Barrier]:
    return {task: Barrier(JOB, CheckpointId(checkpoint_id), CheckpointType.CHECKPOINT,
                          CheckpointingMode.EXACTLY_ONCE, task, 1_000 * checkpoint_id, Epoch(epoch))
            for task in tasks}


def _data(records: list[Any]) -> list[Any]:
    return [r for r in records if BARRIER_HEADER not in r.headers]


def _visible_after(declared: Declared, step: str) -> bool:
    return STEPS.index(step) >= STEPS.index(declared.visible_at)


def test_results_become_visible_at_the_declared_step(make_output, read_topic, end_offsets) -> None:
    out = make_output()
    output = out.attempt(1)
    batch = _batch("b1")
    n = len(_values(batch))
    output.recover([], CheckpointId(0))

    for step in STEPS:
        if step == "write":
            output.write(batch)
        elif step == "pre_commit":
            state = output.pre_commit(_barriers(1))
            if out.declared.snapshots_buffers:
                assert set(state) == set(TASKS)
                for task in TASKS:
                    (buffer,) = map(PendingBuffer.decode, state[task])
                    assert buffer == PendingBuffer(task, CheckpointId(1), tuple(batch[task]))
            else:
                assert state == {}
        else:
            output.commit(CheckpointId(1))
        if _visible_after(out.declared, step):
            assert sorted(r.value for r in _data(read_topic(out.topic, "read_committed", n))) == \
                sorted(_values(batch)), step
            assert output.records_out == n
        elif out.declared.held_back:
            assert end_offsets(out.topic) == 0, f"{out.kind}: records left the client at {step}"
            assert output.records_out == 0
        else:  # handed to the producer, not yet promised to be delivered
            assert output.records_out == n
    # and exactly the batch, no aborted records in between: uncommitted readers see the same data
    committed = _data(read_topic(out.topic, "read_committed", n))
    uncommitted = _data(read_topic(out.topic, "read_uncommitted", n))
    assert [r.value for r in committed] == [r.value for r in uncommitted]
    assert Counter(r.value for r in committed) == Counter(_values(batch))


def test_an_aborted_checkpoint_is_delivered_with_the_next_completed_one(make_output, read_topic,
                                                                        end_offsets) -> None:
    out = make_output()
    output = out.attempt(1)
    first, second = _batch("b1"), _batch("b2")
    output.write(first)
    output.pre_commit(_barriers(1))
    output.abort(CheckpointId(1))
    if _visible_after(out.declared, "pre_commit"):
        assert [r.value for r in _data(read_topic(out.topic, "read_committed", 6))] == _values(first)
    else:
        assert out.declared.held_back and end_offsets(out.topic) == 0
    output.write(second)
    output.pre_commit(_barriers(2))
    output.commit(CheckpointId(2))
    # one partition: the order is the write order, each result once
    assert [r.value for r in _data(read_topic(out.topic, "read_committed", 12))] == \
        _values(first) + _values(second)
    assert output.records_out == 12


def test_restoring_a_completed_checkpoint_writes_nothing_again(make_output, read_topic) -> None:
    out = make_output()
    first = out.attempt(1)
    batch = _batch("b1")
    first.write(batch)
    state = first.pre_commit(_barriers(1))
    first.commit(CheckpointId(1))
    # the stage fails after the completed notification; the next attempt restores checkpoint 1
    second = out.attempt(2)
    second.recover([item for items in state.values() for item in items], CheckpointId(1))
    assert second.records_out == 0
    assert [r.value for r in _data(read_topic(out.topic, "read_committed", 6))] == _values(batch)


def test_restoring_a_checkpoint_whose_commit_was_lost_delivers_it_once(make_output, read_topic) -> None:
    out = make_output()
    first = out.attempt(1)
    batch = _batch("b1")
    first.write(batch)
    state = first.pre_commit(_barriers(1))
    # checkpoint 1 completed, but the attempt died before it handled the notification; the next
    # attempt restores checkpoint 1 (its snapshot holds ``state``) and the sources resume after it
    second = out.attempt(2)
    second.recover([item for items in state.values() for item in items], CheckpointId(1))
    data = _data(read_topic(out.topic, "read_committed", 6))
    assert [r.value for r in data] == _values(batch)
    assert second.records_out == (6 if out.declared.snapshots_buffers else 0)


def test_a_batch_of_a_failed_attempt_is_seen_as_declared(make_output, read_topic) -> None:
    out = make_output()
    batch = _batch("b1")
    doomed = out.attempt(1)
    doomed.write(batch)  # the attempt dies before checkpoint 1; no restore point: start over
    retry = out.attempt(2)
    retry.write(batch)
    retry.pre_commit(_barriers(1, epoch=2))
    retry.commit(CheckpointId(1))

    data = _data(read_topic(out.topic, "read_committed", 6))
    seen = Counter(r.value for r in data)
    expected = Counter(_values(batch))
    if out.declared.failed_attempt == "once":
        assert seen == expected
    elif out.declared.failed_attempt == "once per epoch":
        by_epoch = {epoch: Counter(r.value for r in data if r.headers[EPOCH_HEADER] == epoch)
                    for epoch in (b"1", b"2")}
        assert by_epoch == {b"1": expected, b"2": expected}  # the reading stage keeps epoch 2 only
    else:
        assert set(seen) == set(expected) and all(1 <= count <= 2 for count in seen.values())


def test_records_headers_and_barriers_are_as_declared(make_output, read_topic) -> None:
    partitions = 3
    out = make_output(partitions)
    output = out.attempt(1)
    batch = _batch("b1", per_task=6)
    output.write(batch)
    output.pre_commit(_barriers(1))
    output.commit(CheckpointId(1))

    expected = len(_values(batch)) + (partitions * len(TASKS) if out.declared.writes_barriers else 0)
    records = read_topic(out.topic, "read_committed", expected)
    assert len(records) == expected
    for record in _data(records):
        task = record.value.decode().split("/")[1]
        if out.declared.tags_records:
            assert record.headers == {EPOCH_HEADER: b"1", TASK_HEADER: task.encode()}
        else:
            assert record.headers == {}
    barriers = [r for r in records if BARRIER_HEADER in r.headers]
    if not out.declared.writes_barriers:
        assert barriers == []
        return
    for partition in range(partitions):
        in_partition = [r for r in records if r.partition == partition]
        tail = in_partition[-len(TASKS):]  # the barriers come after all of the checkpoint's data
        assert all(BARRIER_HEADER in r.headers for r in tail)
        assert {codec.decode(r.value) for r in tail} == set(_barriers(1).values())
        assert all(codec.decode(r.headers[BARRIER_HEADER]) == codec.decode(r.value) for r in tail)


# --- one stage's two-phase-commit output spread over worker processes ------------------------

WORKER_TASKS = ((TaskId("sink#0"),), (TaskId("sink#1"), TaskId("sink#2")))


@dataclass
class SinkStage:
    """The output topic, marker topic and per-worker transactional ids of one sink stage."""

    client: dict[str, Any]
    topic: str
    markers: str
    txids: tuple[str, ...]
    opened: list[TwoPhaseCommitOutput]

    def worker(self, index: int) -> TwoPhaseCommitOutput:
        """An attempt of worker ``index``, started (its init_transactions fenced the previous one,
        as it has by the time a worker's attempt uses its output)."""
        output = TwoPhaseCommitOutput(self.client, self.topic, JOB, OperatorId("sink"), self.txids[index],
                                      self.markers, hold_until_commit=tansu_selected())
        self.opened.append(output)
        output.started()
        return output

    def checkpoint(self, worker: TwoPhaseCommitOutput, index: int, checkpoint_id: int, tag: str) -> tuple[
            list[bytes], list[bytes]]:
        """Worker ``index`` writes a batch of its tasks and seals it by ``checkpoint_id``: (its
        operator-state items, the values written)."""
        batch = _batch(tag, tasks=WORKER_TASKS[index])
        worker.write(batch)
        state = worker.pre_commit(_barriers(checkpoint_id, tasks=WORKER_TASKS[index]))
        return [item for items in state.values() for item in items], _values(batch)


@pytest.fixture
def sink_stage(client: dict[str, Any], new_topic: Callable[[str, int], str],
               unique_name: Callable[[str], str]) -> Iterator[SinkStage]:
    stage = SinkStage(client, new_topic("out", 1), unique_name("sink-commits"),
                      (unique_name("txn-w0"), unique_name("txn-w1")), [])
    yield stage
    for output in stage.opened:
        output.close()


def _markers(read_topic: Callable[..., list[Any]], topic: str, expected: int) -> set[tuple[int, int, str | None, str]]:
    return {(m.partition, m.batch_id, m.task, m.transactional_id)
            for m in (CommitMarker.decode(r.value) for r in read_topic(topic, "read_committed", expected))}


def test_workers_commit_a_checkpoint_independently_and_a_dead_workers_buffers_once(sink_stage, read_topic) -> None:
    worker0, worker1 = sink_stage.worker(0), sink_stage.worker(1)
    state0, first0 = sink_stage.checkpoint(worker0, 0, 1, "b1")
    state1, first1 = sink_stage.checkpoint(worker1, 1, 1, "b1")
    worker0.commit(CheckpointId(1))  # worker 1 dies before it commits checkpoint 1
    _, second0 = sink_stage.checkpoint(worker0, 0, 2, "b2")
    worker0.commit(CheckpointId(2))  # and worker 0 commits checkpoint 2 before the restore

    # both restart from checkpoint 1, each with its own transactional id and its own tasks' state
    restarted1 = sink_stage.worker(1)
    restarted1.recover(state1, CheckpointId(1))
    restarted0 = sink_stage.worker(0)
    restarted0.recover(state0, CheckpointId(1))

    assert restarted1.records_out == len(first1) and restarted0.records_out == 0
    expected = Counter(first0 + first1 + second0)
    seen = Counter(r.value for r in read_topic(sink_stage.topic, "read_committed", expected.total()))
    assert seen == expected
    tx0, tx1 = sink_stage.txids
    assert _markers(read_topic, sink_stage.markers, 4) == {
        (0, 1, "sink#0", tx0), (0, 2, "sink#0", tx0), (1, 1, "sink#1", tx1), (2, 1, "sink#2", tx1)}


def test_a_smaller_worker_count_fences_the_gone_workers_id_and_commits_its_buffers_once(
        sink_stage, client, read_topic) -> None:
    worker0, worker1 = sink_stage.worker(0), sink_stage.worker(1)
    state0, first0 = sink_stage.checkpoint(worker0, 0, 1, "b1")
    state1, first1 = sink_stage.checkpoint(worker1, 1, 1, "b1")
    worker0.commit(CheckpointId(1))
    # worker 1 dies inside its commit: its transaction (results and markers) stays open
    dying = Producer(producer_config(client, sink_stage.txids[1]))
    dying.init_transactions(30)
    dying.begin_transaction()
    for value in first1:
        dying.produce(sink_stage.topic, value=value)
    due = [PendingBuffer.decode(item) for item in state1]
    for marker in task_commit_markers(f"{JOB}/sink", CheckpointId(1), due, sink_stage.txids[1], 0):
        dying.produce(sink_stage.markers, key=marker.key, value=marker.encode())
    assert dying.flush(10) == 0

    # the stage goes on with one worker: worker 1's id is fenced, worker 0 restores every task
    fence_transactional_ids(client, [sink_stage.txids[1]])
    started = time.monotonic()
    survivor = sink_stage.worker(0)
    survivor.recover(state0 + state1, CheckpointId(1))
    # the marker lookup was not held back by the open transaction until its 60 s timeout
    assert time.monotonic() - started < 30.0
    assert survivor.records_out == len(first1)
    expected = Counter(first0 + first1)
    seen = Counter(r.value for r in read_topic(sink_stage.topic, "read_committed", expected.total()))
    assert seen == expected
    tx0 = sink_stage.txids[0]
    assert _markers(read_topic, sink_stage.markers, 3) == {
        (0, 1, "sink#0", tx0), (1, 1, "sink#1", tx0), (2, 1, "sink#2", tx0)}


def test_a_commit_marker_written_before_markers_were_per_task_still_counts(sink_stage, client, read_topic) -> None:
    worker1 = sink_stage.worker(1)
    state1, first1 = sink_stage.checkpoint(worker1, 1, 1, "b1")
    # checkpoint 1 was committed as the sink did before markers were per task: one marker, slot 0
    older_sink = Producer(producer_config(client, sink_stage.txids[1]))
    older_sink.init_transactions(30)
    older_sink.begin_transaction()
    for value in first1:
        older_sink.produce(sink_stage.topic, value=value)
    marker = CommitMarker(f"{JOB}/sink", 1, 0, sink_stage.txids[1], len(first1), 0)
    older_sink.produce(sink_stage.markers, key=marker.key, value=marker.encode())
    older_sink.commit_transaction(30)

    restarted = sink_stage.worker(1)
    restarted.recover(state1, CheckpointId(1))
    assert restarted.records_out == 0
    assert Counter(r.value for r in read_topic(sink_stage.topic, "read_committed", 6)) == Counter(first1)
