"""A stage worker's time (tidemark.runtime.worker.clock.StageClock) on the runtime's own tasks, without
Kafka or Spark: source watermarks moving at batch ends and ticks, event-time and processing-time
timers firing into the batch, late records, watermark records of channels, what goes downstream,
and the watermarks' snapshot."""

from __future__ import annotations

import json
import time as time_module
from typing import Any

import pytest

from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.keygroups import KeyGroupRange, assign_to_key_group
from tidemark.protocol.messages import Barrier
from tidemark.api import NO_WATERMARK, EventTime, KeyedProcessFunction, LateRecords, Stage
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.clock import StageClock
from tidemark.operators.time import StageTime
from tidemark.runtime.worker.task import StageTask
from tidemark.runtime.worker.watermarks import Unread, WatermarkStatus
from tidemark.state.backend_registry import BackendContext, create_backend
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, TaskId

PARTITIONS = [("in", 0), ("in", 1)]
EVENT_TIME = EventTime(timestamp=lambda v: v["ts"], max_out_of_orderness_ms=0, idle_timeout_ms=1_000)


class Window(KeyedProcessFunction):
    """One event-time timer at ``ts`` (rounded up to a 10 ms window end) and one processing-time
    timer at ``wall``, if given."""

    def process(self, value: Any, ctx: Any) -> None:
        ctx.timer_service().register_event_time_timer(value["ts"] // 10 * 10 + 9)
        if "wall" in value:
            ctx.timer_service().register_processing_time_timer(value["wall"])

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        ctx.emit(ctx.key, {"key": ctx.key, "at": timestamp_ms, "domain": ctx.time_domain})


@pytest.fixture
def tasks(tmp_path):
    stage = Stage("windows", ("in",), lambda v: v["k"], Window, "out")
    time = StageTime(clock=lambda: 1_000_000)
    built = []
    for assignment in plan_assignments((stage.operator_id,), 2, 128):
        context = BackendContext(KeyGroupRange(assignment.key_group_start, assignment.key_group_end), 128,
                                 stage.name, tmp_path / str(assignment.subtask_index))
        task = StageTask(stage, assignment, 2, create_backend("heap", context), time)
        task.open()
        built.append(task)
    yield stage, built, time
    for task in built:
        task.close()


def _answer(*unread: tuple[str, int]) -> Unread:
    """End offsets asked just now (the broker answering all along) show ``unread``."""
    return Unread(frozenset(unread), asked_ms=time_module.monotonic() * 1000)


def _record(partition: int, offset: int, ts: int, **fields: Any) -> InputRecord:
    return InputRecord("in", partition, offset, 0, None, json.dumps({"ts": ts, **fields}).encode())


def _process(clock: StageClock, tasks: list[StageTask], record: InputRecord, key: str) -> bool:
    value = json.loads(record.value)
    stamp = clock.event_time_of(record, value)
    clock.observe(record, stamp)
    if clock.late(record, stamp):
        return False
    _task_of(tasks, key).process(key, {**value, "k": key}, stamp)
    return True


def _task_of(tasks: list[StageTask], key: str) -> StageTask:
    group = assign_to_key_group(key, 128)
    return next(t for t in tasks if group in t.key_groups)


def _fired(tasks: list[StageTask], batch: dict[TaskId, list]) -> list[tuple[str, int, str]]:
    """What the timers emitted so far (the tasks' outputs, gathered into ``batch`` as the worker does)."""
    for task in tasks:
        batch.setdefault(task.task_id, []).extend(task.take_output())
    return sorted((v["key"], v["at"], v["domain"]) for records in batch.values()
                  for v in (json.loads(r[1]) for r in records))


def test_a_source_stage_fires_event_time_timers_when_its_partitions_pass_them(tasks) -> None:
    stage, built, time = tasks
    clock = StageClock("job", stage, 0, EVENT_TIME, built, time, {}, reads=PARTITIONS)
    batch: dict[TaskId, list] = {}
    assert _process(clock, built, _record(0, 0, 5), "a") and _process(clock, built, _record(1, 0, 25), "b")
    clock.end_of_batch(unread=_answer())
    assert time.watermark == 4 and _fired(built, batch) == []  # min(5, 25) - 0 - 1
    assert clock.to_emit() == WatermarkStatus(4)
    clock.emitted(WatermarkStatus(4))
    assert clock.to_emit() is None  # no news
    _process(clock, built, _record(0, 1, 31), "c")
    clock.end_of_batch(unread=_answer())
    assert time.watermark == 24 and _fired(built, batch) == [("a", 9, "event-time")]
    assert clock.late(_record(1, 1, 20), 20)  # at or before the watermark: dropped
    assert clock.late_records is not None and clock.late_records.late == 1


def test_an_idle_partition_releases_the_watermark_on_a_tick_and_processing_timers_fire_there(tasks) -> None:
    stage, built, time = tasks
    clock = StageClock("job", stage, 0, EVENT_TIME, built, time, {}, reads=PARTITIONS)
    batch: dict[TaskId, list] = {}
    clock.tick(unread=_answer())  # idleness counts from here
    _process(clock, built, _record(0, 0, 15, wall=999_999), "a")
    clock.end_of_batch(unread=_answer())
    assert time.watermark == NO_WATERMARK  # partition 1 never had a record, not idle yet
    assert _fired(built, batch) == []
    time_module.sleep(1.05)
    clock.tick(unread=_answer(("in", 1)))  # unread records: not idle
    assert time.watermark == NO_WATERMARK
    clock.tick(unread=_answer())
    assert time.watermark == 14 and clock.to_emit() == WatermarkStatus(14, idle=True)
    assert _fired(built, batch) == [("a", 999_999, "processing-time")]  # due by the clock (1_000_000)


def test_a_channel_stage_moves_on_its_channels_and_snapshots_them_at_the_barrier(tasks) -> None:
    stage, built, time = tasks
    up = [TaskId("up#0"), TaskId("up#1")]
    channels = {("ch", 0, task) for task in up}
    clock = StageClock("job", stage, 0, EVENT_TIME, built, time, {}, channels=channels)
    assert not clock.extracts_from_value("t")  # a channel record carries its event time
    batch: dict[TaskId, list] = {}
    timed = InputRecord("ch", 0, 0, 0, None, json.dumps({"ts": 12}).encode(), Epoch(1), up[0], event_time_ms=12)
    assert clock.event_time_of(timed, None) == 12
    _process(clock, built, timed, "a")

    def mark(task: TaskId, watermark: int, offset: int) -> InputRecord:
        return InputRecord("ch", 0, offset, 0, None, b"", Epoch(1), task, watermark=WatermarkStatus(watermark))

    clock.channel_watermark(mark(up[0], 30, 1))
    assert time.watermark == NO_WATERMARK  # up#1 has said nothing yet
    clock.channel_watermark(mark(up[1], 20, 2))
    assert time.watermark == 20 and _fired(built, batch) == [("a", 19, "event-time")]
    for offset, task in enumerate(up, start=3):
        barrier = Barrier("job", CheckpointId(4), CheckpointType.CHECKPOINT, CheckpointingMode.AT_LEAST_ONCE, task,
                          0, Epoch(1))
        clock.barrier(InputRecord("ch", 0, offset, 0, None, b"", Epoch(1), task, barrier=barrier))
    clock.channel_watermark(mark(up[1], 50, 5))  # after the barrier
    item = clock.snapshot_item(CheckpointId(4))
    assert item is not None and json.loads(item)["floor"] == 20 and time.watermark == 30

    restored_time = StageTime()
    restored = StageClock("job", stage, 0, EVENT_TIME, built, restored_time, {}, channels=channels)
    restored.restore([item])
    assert restored_time.watermark == 20  # the cut's, not what came after the barrier


def test_without_event_time_only_processing_time_timers_fire(tasks) -> None:
    stage, built, time = tasks
    clock = StageClock("job", stage, 0, None, built, time, {}, reads=PARTITIONS)
    assert not clock.has_watermark and clock.late_records is None and clock.snapshot_item(CheckpointId(1)) is None
    batch: dict[TaskId, list] = {}
    record = InputRecord("in", 0, 0, 777, None, json.dumps({"ts": 5, "wall": 10}).encode())
    assert clock.event_time_of(record, {"ts": 5}) == 777  # the Kafka timestamp
    _process(clock, built, record, "a")
    clock.tick(unread=_answer())
    assert _fired(built, batch) == [("a", 10, "processing-time")] and time.watermark == NO_WATERMARK
    assert clock.to_emit() is None


def test_a_side_output_stage_needs_its_topic() -> None:
    with pytest.raises(ValueError, match="late_output"):
        Stage("s", ("in",), str, Window, "out", late_records=LateRecords.SIDE_OUTPUT)
