"""When a source stage worker acts on the control plane. Inside a long micro-batch it looks every
0.1 s: a completed checkpoint's output is committed then (its results visible while the next batch
is processed), and a trigger is taken at the record the input reached, its positions cut there
(Flink's sources checkpoint between any two records), unless the batch cannot be cut (a Spark
step made its rows) or the trigger is a stop-with-savepoint: those wait for the batch's end, in
order. A periodic trigger that comes before the attempt processed its first records waits for them
(at most 3 s), so that the first checkpoint, triggered at the attempt's registration, commits the
first results."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from tidemark.protocol.messages import CheckpointCompleted, CheckpointTrigger
from tidemark.runtime.job.records import InputRecord, batch_ends, records_of
from tidemark.runtime.worker import runner as runner_module
from tidemark.runtime.worker.inputs import SourceInput
from tidemark.runtime.worker.runner import StageRunner
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, TopicPartition

EPOCH = Epoch(3)


def trigger(n: int) -> CheckpointTrigger:
    return CheckpointTrigger(JobId("j"), CheckpointId(n), CheckpointType.CHECKPOINT, CheckpointingMode.EXACTLY_ONCE,
                             0, EPOCH)


def completed(n: int) -> CheckpointCompleted:
    return CheckpointCompleted(JobId("j"), CheckpointId(n), CheckpointType.CHECKPOINT, 0, f"chk-{n}", EPOCH)


def make_runner(notes: list[list[Any]], events: list[tuple[str, int]], processing: bool = True,
                takes_triggers: bool = True) -> StageRunner:
    control = SimpleNamespace(poll=lambda: notes.pop(0) if notes else [], answer=lambda answers: None)
    output = SimpleNamespace(commit=lambda cid: events.append(("commit", int(cid))))
    runner = StageRunner(processing=processing,
        job=JobId("j"), stage=SimpleNamespace(name="s"), attempt=SimpleNamespace(epoch=EPOCH), tasks=[],
        input=SimpleNamespace(takes_triggers=takes_triggers), output=output, control=control, clock=None,
        checkpointer=SimpleNamespace(thread=SimpleNamespace(raise_failure=lambda: None)), failures=None,
        lag=None, positions={}, read_partitions=[], restored_from=None, local_dir=None)
    runner.checkpoint = lambda cid, kind, aligned, target=None: events.append(("checkpoint", int(cid)))
    return runner


def stop(n: int) -> CheckpointTrigger:
    return CheckpointTrigger(JobId("j"), CheckpointId(n), CheckpointType.STOP_WITH_SAVEPOINT,
                             CheckpointingMode.EXACTLY_ONCE, 0, EPOCH, "target")


def test_a_completion_inside_a_batch_commits_at_once_and_a_trigger_waits_for_the_batch_end(monkeypatch) -> None:
    events: list[tuple[str, int]] = []
    runner = make_runner([[trigger(2), completed(1)], [trigger(3)], [completed(2)]], events)
    now = [10.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    runner.within_batch()  # due (never looked before): the completion is committed, trigger 2 kept
    now[0] += 0.05
    runner.within_batch()  # not due: the control plane is not polled
    assert events == [("commit", 1)]
    now[0] += 0.05
    runner.within_batch()  # due: trigger 3 kept behind trigger 2
    assert events == [("commit", 1)]
    runner.handle_control()  # the batch's end: the kept triggers in order, then what is new
    assert events == [("commit", 1), ("checkpoint", 2), ("checkpoint", 3), ("commit", 2)]


def savepoint(n: int) -> CheckpointTrigger:
    return CheckpointTrigger(JobId("j"), CheckpointId(n), CheckpointType.SAVEPOINT, CheckpointingMode.EXACTLY_ONCE,
                             0, EPOCH, "target")


def test_a_periodic_trigger_before_the_first_records_waits_for_them(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    events: list[tuple[str, int]] = []
    runner = make_runner([[savepoint(1)], [trigger(2)], [savepoint(3)], []], events, processing=False)
    runner.handle_control()  # a savepoint is not kept
    runner.handle_control()  # no records yet: kept
    runner.handle_control()  # kept behind it: checkpoints are taken in id order
    assert events == [("checkpoint", 1)]
    now[0] += 1.0
    runner.processing = True  # the first batch's records were counted (flush_outputs)
    runner.handle_control()
    assert events == [("checkpoint", 1), ("checkpoint", 2), ("checkpoint", 3)]


def test_a_channel_stage_keeps_no_trigger_before_its_first_records(monkeypatch) -> None:
    """It takes no triggers (it checkpoints on aligned barriers): a trigger is dropped at once,
    and one after it is not held behind it."""
    now = [100.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    runner = make_runner([[trigger(1)], [trigger(2)]], [], processing=False, takes_triggers=False)
    runner.handle_control()
    runner.handle_control()
    assert runner._deferred == []


def test_without_records_a_kept_trigger_is_taken_after_3_s(monkeypatch) -> None:
    now = [100.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    events: list[tuple[str, int]] = []
    runner = make_runner([[trigger(1)]], events, processing=False)
    runner.handle_control()
    now[0] += 2.9
    runner.handle_control()
    assert events == []
    now[0] += 0.2
    runner.handle_control()
    assert events == [("checkpoint", 1)]


def test_the_source_input_asks_every_4096_records() -> None:
    asked: list[int] = []
    seen: list[int] = []
    path = SimpleNamespace(clock=SimpleNamespace(end_of_batch=lambda unread: None), failures=None,
                           process=lambda record: seen.append(record.offset))
    source = SourceInput(path, {}, lambda: None)
    records = [InputRecord(topic="in", partition=0, offset=n, key=None, value=b"x", timestamp_ms=0)
               for n in range(10_000)]
    checkpoints = SimpleNamespace(finished=False, within_batch=lambda cut: asked.append(len(seen)))
    source.feed(records, checkpoints)
    assert asked == [4095, 8191] and len(seen) == 10_000


def test_inside_a_batch_that_can_be_cut_a_trigger_is_taken_after_the_cut_and_a_stop_waits(monkeypatch) -> None:
    now = [10.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    events: list[tuple[str, int]] = []
    runner = make_runner([[trigger(1)], [stop(2)], [trigger(3)]], events)
    runner.within_batch(lambda: events.append(("cut", 1)))
    assert events == [("cut", 1), ("checkpoint", 1)]
    now[0] += 0.1
    runner.within_batch(lambda: events.append(("cut", 2)))  # a stop-with-savepoint: the batch ends first
    now[0] += 0.1
    runner.within_batch(lambda: events.append(("cut", 3)))  # kept behind it
    assert events == [("cut", 1), ("checkpoint", 1)]
    runner.handle_control()
    assert events == [("cut", 1), ("checkpoint", 1), ("checkpoint", 2), ("checkpoint", 3)]


def test_a_trigger_kept_for_the_first_records_is_taken_at_the_first_cut(monkeypatch) -> None:
    now = [10.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    events: list[tuple[str, int]] = []
    runner = make_runner([[trigger(1)], []], events, processing=False)
    runner.handle_control()  # before the first batch: kept
    now[0] += 0.5
    runner.within_batch(lambda: events.append(("cut", 1)))  # the first batch's first records are in
    assert events == [("cut", 1), ("checkpoint", 1)]


class _Cuts:
    """The checkpoints a source input is fed with, taking one at every look inside the batch:
    each records the positions the cut left and the records processed by then."""

    finished = False

    def __init__(self, positions: dict[TopicPartition, int], seen: list[InputRecord]) -> None:
        self.positions, self.seen = positions, seen
        self.cuts: list[tuple[dict[TopicPartition, int], int]] = []

    def within_batch(self, cut=None) -> None:
        assert cut is not None
        cut()
        self.cuts.append((dict(self.positions), len(self.seen)))


def test_a_cut_moves_the_positions_to_after_exactly_the_records_processed() -> None:
    """An Arrow batch as the query hands it (partitions interleaved, offsets of an earlier batch
    before it): at each cut, every partition's position is after its last record processed."""
    rows = [(p, 1000 + n) for n in range(3000) for p in (0, 1, 2) if (n + p) % 4]  # uneven, interleaved
    table = pa.table({"key": [None] * len(rows), "value": [b"v"] * len(rows), "topic": ["in"] * len(rows),
                      "partition": [p for p, _ in rows], "offset": [o for _, o in rows],
                      "timestamp": pa.array([0] * len(rows), pa.timestamp("ms")),
                      "headers": pa.array([[]] * len(rows), pa.list_(pa.struct([("key", pa.string()),
                                                                                   ("value", pa.binary())])))})
    seen: list[InputRecord] = []
    path = SimpleNamespace(clock=SimpleNamespace(end_of_batch=lambda unread: None), failures=None, process=seen.append)
    positions = {TopicPartition("in", 0): 1000, TopicPartition("in", 3): 7}  # before this batch
    source = SourceInput(path, positions, lambda: None)
    cuts = _Cuts(positions, seen)
    source.feed(records_of(table), cuts, batch_ends(table), partial(batch_ends, table))
    assert [n for _, n in cuts.cuts] == [4095]
    at_cut, done = cuts.cuts[0]
    expected = {TopicPartition("in", 3): 7}
    for record in seen[:done]:
        expected[TopicPartition(record.topic, record.partition)] = record.offset + 1
    assert at_cut == expected
    ends = {TopicPartition("in", p): max(o for q, o in rows if q == p) + 1 for p in (0, 1, 2)}
    assert positions == ends | {TopicPartition("in", 3): 7}  # the batch's end moved them on


def test_without_ends_the_positions_are_kept_per_record_and_a_cut_moves_nothing() -> None:
    seen: list[InputRecord] = []
    path = SimpleNamespace(clock=SimpleNamespace(end_of_batch=lambda unread: None), failures=None, process=seen.append)
    positions: dict[TopicPartition, int] = {}
    cuts = _Cuts(positions, seen)
    SourceInput(path, positions, lambda: None).feed(
        [InputRecord("in", n % 2, n, 0, None, b"x") for n in range(5000)], cuts)
    assert cuts.cuts == [({("in", 0): 4095, ("in", 1): 4094}, 4095)]


def test_a_batch_with_ends_and_no_cut_defers_its_triggers() -> None:
    """A Spark step's batch: the input gives no cut."""
    asked: list[Any] = []
    path = SimpleNamespace(clock=SimpleNamespace(end_of_batch=lambda unread: None), failures=None,
                           process=lambda record: None)
    records = [InputRecord("in", 0, n, 0, None, b"x") for n in range(5000)]
    SourceInput(path, {}, lambda: None).feed(records, SimpleNamespace(finished=False, within_batch=asked.append),
                                             {TopicPartition("in", 0): 5000})
    assert asked == [None]
