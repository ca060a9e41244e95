"""A fused worker's local channel (``tidemark.runtime.worker.local_channel``): the exchange
reader's records of its worker's own key groups reach the keyed stage in the process, in order
per reader task with its watermarks and barriers, bounded, and never in a checkpoint's cut or
positions; the exchange keeps the other workers' records and every barrier."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any

import pytest

from record_paths import record_path
from tidemark.api import Input, KeyedProcessFunction, Stage
from tidemark.keygroups import KeyGroupRange, assign_to_key_group
from tidemark.protocol.messages import Barrier
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.alignment import Aligned, BarrierAligner
from tidemark.runtime.worker.inputs import ChannelInput
from tidemark.runtime.worker.local_channel import LOCAL_TOPIC, LocalChannel, LocalChannelClosed, LocalSplitOutput
from tidemark.runtime.worker.outputs import LOCAL_PARTITION
from tidemark.runtime.worker.routing import KeyGroupRouter, KeyPartitioner
from tidemark.runtime.worker.watermarks import WatermarkStatus
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, TaskId

pytestmark = pytest.mark.unit

R0, R1 = TaskId("s.read#0"), TaskId("s.read#1")  # the fused reader's tasks
EXCHANGE = "x.exchange.s"


def _barrier(task: TaskId, cid: int = 1) -> Barrier:
    return Barrier(JobId("j"), CheckpointId(cid), CheckpointType.CHECKPOINT, CheckpointingMode.EXACTLY_ONCE, task, 0,
                   Epoch(1))


def _routed(key: str, stamp: int = 5) -> tuple[Any, ...]:
    return (key.encode(), json.dumps({"k": key}).encode(), stamp, LOCAL_PARTITION, "in", {"k": key})


def _channel(capacity: int = 100) -> tuple[LocalChannel, list[int]]:
    local = LocalChannel(Epoch(1), capacity)
    local.tasks = (R0, R1)
    pushes: list[int] = []
    local.on_push = lambda: pushes.append(1)
    return local, pushes


def test_each_task_hands_over_its_records_then_its_watermark_then_its_barrier_tagged_with_the_epoch() -> None:
    local, pushes = _channel()
    local.push_records(R0, [_routed("a", 7), _routed("b")])
    local.push_records(R1, [_routed("c")])
    local.push_watermark(WatermarkStatus(6))
    local.push_barriers({R0: _barrier(R0), R1: _barrier(R1)})
    assert pushes == [1]  # one drain scheduled until it runs
    items = local.drain()
    by_task = {task: [(r.offset, r.row, r.watermark, r.barrier) for r in items if r.task == task] for task in (R0, R1)}
    assert by_task[R0] == [(0, {"k": "a"}, None, None), (1, {"k": "b"}, None, None),
                           (2, None, WatermarkStatus(6), None), (3, None, None, _barrier(R0))]
    assert by_task[R1] == [(0, {"k": "c"}, None, None), (1, None, WatermarkStatus(6), None),
                           (2, None, None, _barrier(R1))]
    first = items[0]
    assert (first.topic, first.partition, first.epoch, first.origin, first.key, first.event_time_ms,
            first.timestamp_ms) == (LOCAL_TOPIC, 0, Epoch(1), "in", b"a", 7, 7)
    assert local.channels == {(LOCAL_TOPIC, 0, R0), (LOCAL_TOPIC, 0, R1)}
    local.push_records(R0, [_routed("d")])
    assert pushes == [1, 1] and [r.offset for r in local.drain()] == [4]  # drained: the next push schedules again


def test_a_full_channel_holds_the_pusher_until_drained_and_barriers_never_wait() -> None:
    local, _ = _channel(capacity=2)
    local.push_records(R0, [_routed("a"), _routed("b"), _routed("c")])  # an empty channel takes any batch
    pushed = threading.Event()

    def push() -> None:
        local.push_records(R0, [_routed("d")])
        pushed.set()

    threading.Thread(target=push, daemon=True).start()
    assert not pushed.wait(0.3)  # full: the reader waits (back pressure)
    local.push_barriers({R0: _barrier(R0)})  # a barrier goes in anyway
    local.push_watermark(WatermarkStatus(1))
    assert [(r.row is not None, r.barrier is not None) for r in local.drain()] == [
        (True, False)] * 3 + [(False, True), (False, False), (False, False)]  # R0 and R1 watermarks last
    assert pushed.wait(5)
    assert [r.row for r in local.drain()] == [{"k": "d"}]


def test_closing_releases_a_waiting_pusher_and_refuses_later_pushes() -> None:
    local, _ = _channel(capacity=1)
    local.push_records(R0, [_routed("a")])
    errors: list[BaseException] = []

    def push() -> None:
        try:
            local.push_records(R0, [_routed("b")])
        except BaseException as exc:
            errors.append(exc)

    pusher = threading.Thread(target=push, daemon=True)
    pusher.start()
    time.sleep(0.1)
    local.close()
    pusher.join(5)
    assert [type(e) for e in errors] == [LocalChannelClosed]
    with pytest.raises(LocalChannelClosed):
        local.push_barriers({R0: _barrier(R0)})
    assert local.drain() == []


class _Exchange:
    def __init__(self, fail: bool = False) -> None:
        self.written: list[tuple[dict, WatermarkStatus | None]] = []
        self.barriers: list[dict] = []
        self.records_out = 0
        self.fail = fail

    def write(self, batch, watermark=None) -> None:
        if self.fail:
            raise RuntimeError("broker gone")
        self.written.append((dict(batch), watermark))

    def pre_commit(self, barriers):
        self.barriers.append(dict(barriers))
        return {}


def test_the_split_output_sends_local_records_in_process_and_the_rest_and_every_barrier_through_the_exchange() -> None:
    local, _ = _channel()
    exchange = _Exchange()
    output = LocalSplitOutput(exchange, local)  # type: ignore[arg-type]
    remote = (b"z", b"{}", 5, 3, "in")
    output.write({R0: [_routed("a"), remote], R1: [_routed("c")]}, WatermarkStatus(4))
    output.pre_commit({R0: _barrier(R0), R1: _barrier(R1)})
    assert exchange.written == [({R0: [remote]}, WatermarkStatus(4))]  # R1's only record stayed local
    assert exchange.barriers == [{R0: _barrier(R0), R1: _barrier(R1)}]
    kinds = [("barrier" if r.barrier else "watermark" if r.watermark else "record", r.task) for r in local.drain()]
    assert kinds == [("record", R0), ("record", R1), ("watermark", R0), ("watermark", R1),
                     ("barrier", R0), ("barrier", R1)]
    failing = LocalSplitOutput(_Exchange(fail=True), local)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        failing.write({R0: [_routed("b")], R1: [remote]})
    assert local.drain() == []  # nothing went local before the exchange took its part


class _Count(KeyedProcessFunction):
    def process(self, value, ctx) -> None:
        ctx.emit(ctx.key, value)


class _Checkpoints:
    finished = False

    def __init__(self) -> None:
        self.taken: list[Aligned] = []

    def checkpoint(self, checkpoint_id, kind, aligned) -> None:
        self.taken.append(aligned)

    def within_batch(self, cut=None) -> None:
        pass

    def decline(self, checkpoint_id, reason) -> None:
        raise AssertionError(reason)


def _input(key: str) -> InputRecord:
    return InputRecord("in", 0, 0, 0, None, json.dumps({"k": key}).encode())


def test_the_keyed_checkpoint_holds_exactly_the_local_records_before_the_readers_barrier_and_no_local_cut(
        tmp_path) -> None:
    """Reader: its forwarder keeps worker 0's key groups local; keyed worker 0 aligns the local
    channel with the exchange's and snapshots what came before barrier 1 on both, and its cut
    and positions name only the exchange."""
    stage = dataclasses.replace(Stage("s", (Input("in"),), lambda v: v["k"], _Count, "out"),
                                exchange=EXCHANGE, exchanged=("in",))
    reader, reader_tasks, _ = record_path(stage, tmp_path / "reader")
    keyed, keyed_tasks, failures = record_path(stage, tmp_path / "keyed", owned=0)
    local, _ = _channel()
    local.tasks = tuple(t.task_id for t in reader_tasks)
    forward = reader.forwarder(KeyPartitioner(128, 2), KeyGroupRouter(128, [KeyGroupRange(0, 63)], complete=False))
    mine = [k for k in (f"k{i}" for i in range(40)) if assign_to_key_group(k, 128) < 64][:3]
    theirs = next(k for k in (f"k{i}" for i in range(40)) if assign_to_key_group(k, 128) >= 64)
    output = LocalSplitOutput(_Exchange(), local)  # type: ignore[arg-type]

    def flush() -> None:
        output.write({t.task_id: t.take_output() for t in reader_tasks if t.output})

    for key in (mine[0], theirs, mine[1]):
        forward(_input(key))
    flush()
    output.pre_commit({t.task_id: _barrier(t.task_id) for t in reader_tasks})
    forward(_input(mine[2]))  # after the barrier: the next checkpoint's
    flush()
    written = output.exchange.written  # type: ignore[attr-defined]
    assert written[0][0] == {reader_tasks[0].task_id: [(None, json.dumps({"k": theirs}).encode(), 0, 1, "in")]}

    exchange_channels = {(EXCHANGE, 0, t.task_id) for t in reader_tasks}
    aligner = BarrierAligner(CheckpointingMode.EXACTLY_ONCE, Epoch(1), exchange_channels | local.channels)
    positions: dict = {}
    channel_input = ChannelInput(keyed, positions, aligner, Epoch(1))
    checkpoints = _Checkpoints()
    channel_input.feed(local.drain(), checkpoints)  # the local barrier first: mine[2] is held
    assert checkpoints.taken == [] and aligner.held == 1
    processed = [json.loads(v)["k"] for t in keyed_tasks for _, v, _ in t.take_output()]
    assert processed == mine[:2]
    channel_input.feed([InputRecord(EXCHANGE, 0, n, 0, None, b"", Epoch(1), t.task_id, _barrier(t.task_id))
                        for n, t in enumerate(reader_tasks)], checkpoints)
    (aligned,) = checkpoints.taken
    assert set(aligned.cut) == exchange_channels and aligned.resume_offsets() == {(EXCHANGE, 0): 1}
    assert [json.loads(v)["k"] for t in keyed_tasks for _, v, _ in t.take_output()] == [mine[2]]  # released after
    assert set(positions) == {(EXCHANGE, 0)} and failures.failed == []


def test_a_key_that_cannot_be_routed_is_dead_lettered_by_the_reader_not_raised(tmp_path) -> None:
    """With one worker (no exchange partitioner) every routable key is local; one that cannot be
    routed (a str with a lone surrogate has no UTF-8 bytes) goes to the error policy, as the keyed
    stage would have sent it through the exchange."""
    stage = dataclasses.replace(Stage("s", (Input("in"),), lambda v: v["k"], _Count, "out"),
                                exchange=EXCHANGE, exchanged=("in",))
    reader, reader_tasks, failures = record_path(stage, tmp_path)
    forward = reader.forwarder(None, KeyGroupRouter(128, [KeyGroupRange(0, 127)], complete=False))
    forward(InputRecord("in", 0, 0, 0, None, b'{"k": "\\ud800"}'))
    forward(_input("a"))
    ((record, error),) = failures.failed
    assert record.offset == 0 and type(error).__name__ == "MalformedInput"
    assert [r[3] for t in reader_tasks for r in t.output] == [LOCAL_PARTITION]
