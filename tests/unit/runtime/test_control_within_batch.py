"""When a source stage worker acts on the control plane. Inside a long micro-batch it looks every
0.1 s: a completed checkpoint's output is committed then (its results visible while the next batch
is processed), while a trigger waits for the batch's end (a source stage checkpoints between
batches), in order. A periodic trigger that comes before the attempt processed its first records
waits for them (at most 3 s), so that the first checkpoint, triggered at the attempt's
registration, commits the first batch's results."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tidemark.protocol.messages import CheckpointCompleted, CheckpointTrigger
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker import runner as runner_module
from tidemark.runtime.worker.inputs import SourceInput
from tidemark.runtime.worker.runner import StageRunner
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId

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
    checkpoints = SimpleNamespace(finished=False, within_batch=lambda: asked.append(len(seen)))
    source.feed(records, checkpoints)
    assert asked == [4095, 8191] and len(seen) == 10_000
