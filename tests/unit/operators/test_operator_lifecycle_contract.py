"""The operator lifecycle contract (``tidemark.operators.lifecycle``): every call the runtime makes
to a task's operator, recorded across a start, records, watermarks, a completed and an aborted
checkpoint, a checkpoint never notified, a failover that restores it, and a stop-with-savepoint,
in exactly the documented order, on the heap, RocksDB and changelog backends; the state the
operator kept (keyed state, timers, operator state) is what the restore gives back."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.operators.keyed_process import KeyedProcessOperator
from tidemark.operators.lifecycle import StateInitializationContext, StateSnapshotContext
from tidemark.api import CheckpointedFunction, KeyedProcessFunction, Stage
from tidemark.state import ListStateDescriptor, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness as Harness
from tidemark.testing.changelog import InMemoryChangelogTopic

COUNT = ValueStateDescriptor("count", default=0)
SEEN = ListStateDescriptor("seen")


class Counting(KeyedProcessFunction, CheckpointedFunction):
    """Counts per key (keyed state), sets an event-time timer 10 ms after each record and keeps the
    values it saw in operator state (an even-split list, filled at each snapshot)."""

    def initialize_state(self, ctx: Any) -> None:
        self.seen = ctx.get_list_state(SEEN)
        self.pending: list[str] = []

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)

    def process(self, value: Any, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        self.pending.append(value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp_ms + 10)
        ctx.emit(ctx.key, {"key": ctx.key, "count": self.count.value()})

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        ctx.emit(ctx.key, {"key": ctx.key, "timer": timestamp_ms})

    def snapshot_state(self, ctx: Any) -> None:
        self.seen.add_all(self.pending)
        self.pending = []


CALLS: list[tuple[Any, ...]] = []


class Recording(KeyedProcessOperator):
    """The runtime's operator for the function, recording each lifecycle call before making it."""

    def initialize_state(self, context: StateInitializationContext) -> None:
        CALLS.append(("initialize_state", context.restored_checkpoint_id))
        assert context.keyed_state_backend is not None and context.timer_service_manager is not None
        super().initialize_state(context)

    def open(self) -> None:
        CALLS.append(("open",))
        super().open()

    def process_element(self, value: Any, key: Any, timestamp_ms: int) -> None:
        CALLS.append(("process_element", value))
        super().process_element(value, key, timestamp_ms)

    def process_watermark(self, watermark_ms: int) -> None:
        CALLS.append(("process_watermark", watermark_ms))
        super().process_watermark(watermark_ms)

    def prepare_snapshot_pre_barrier(self, checkpoint_id: int) -> None:
        CALLS.append(("prepare_snapshot_pre_barrier", checkpoint_id))
        super().prepare_snapshot_pre_barrier(checkpoint_id)

    def snapshot_state(self, context: StateSnapshotContext) -> None:
        CALLS.append(("snapshot_state", context.checkpoint_id))
        super().snapshot_state(context)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        CALLS.append(("notify_checkpoint_complete", checkpoint_id))
        super().notify_checkpoint_complete(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        CALLS.append(("notify_checkpoint_aborted", checkpoint_id))
        super().notify_checkpoint_aborted(checkpoint_id)

    def finish(self) -> None:
        CALLS.append(("finish",))
        super().finish()

    def close(self) -> None:
        CALLS.append(("close",))
        super().close()


STAGE = Stage("counting", ("in",), lambda value: value, Counting, "out")
BACKENDS = {"heap": ("heap", False), "rocksdb": ("rocksdb", False), "changelog": ("heap", True)}


def _harness(backend: str, topic: InMemoryChangelogTopic) -> Harness:
    kind, changelog = BACKENDS[backend]
    return Harness(STAGE, state_backend=kind, changelog=topic if changelog else None, operator=Recording)


def _timers(emitted: list[Any]) -> list[tuple[str, int]]:
    return [(value["key"], value["timer"]) for value in (record.decoded() for record in emitted)]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_runtime_calls_an_operator_in_the_lifecycle_order(backend: str) -> None:
    CALLS.clear()
    topic = InMemoryChangelogTopic("harness.changelog", partitions=2)
    first = _harness(backend, topic).open()
    first.process("a", timestamp_ms=100)
    first.process("b", timestamp_ms=105)
    assert _timers(first.advance_watermark(110)) == [("a", 110)]
    first.snapshot(1, savepoint=False)
    first.notify_checkpoint_complete(1)
    first.process("a", timestamp_ms=120)
    first.snapshot(2, savepoint=False)
    first.notify_checkpoint_aborted(2)
    first.process("c", timestamp_ms=130)
    third = first.snapshot(3, savepoint=False)  # never notified: the failover comes first
    first.close()  # the attempt fails: close, never finish

    second = _harness(backend, topic).restore(third).open()
    assert second.state(COUNT, "a").value() == 2 and second.state(COUNT, "c").value() == 1
    assert second.timers("a") == [130] and second.timers("b") == [115] and second.timers("c") == [140]
    assert sorted(second.functions[0].seen.get()) == ["a", "a", "b", "c"]
    second.process("a", timestamp_ms=150)
    assert _timers(second.advance_watermark(135)) == [("b", 115), ("a", 130)]
    second.stop_with_savepoint(4)

    assert CALLS == [
        ("initialize_state", None), ("open",),
        ("process_element", "a"), ("process_element", "b"), ("process_watermark", 110),
        ("prepare_snapshot_pre_barrier", 1), ("snapshot_state", 1), ("notify_checkpoint_complete", 1),
        ("process_element", "a"),
        ("prepare_snapshot_pre_barrier", 2), ("snapshot_state", 2), ("notify_checkpoint_aborted", 2),
        ("process_element", "c"),
        ("prepare_snapshot_pre_barrier", 3), ("snapshot_state", 3),
        ("close",),
        ("initialize_state", 3), ("open",),
        ("process_element", "a"), ("process_watermark", 135),
        ("prepare_snapshot_pre_barrier", 4), ("snapshot_state", 4), ("notify_checkpoint_complete", 4),
        ("finish",), ("close",),
    ]


def test_close_follows_a_failing_open_and_a_closed_operator_is_not_finished() -> None:
    class FailsToOpen(Counting):
        def open(self, ctx: Any) -> None:
            raise RuntimeError("no connection")

    CALLS.clear()
    harness = Harness(Stage("fails", ("in",), lambda value: value, FailsToOpen, "out"), operator=Recording)
    with pytest.raises(RuntimeError, match="no connection"):
        harness.open()
    harness.close()
    assert CALLS == [("initialize_state", None), ("open",), ("close",)]
