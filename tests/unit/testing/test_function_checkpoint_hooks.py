"""A user function's checkpoint hooks (CheckpointedFunction, CheckpointListener), run on the
runtime's own tasks through the harness: the order of the calls, operator state of every kind
redistributed on rescale as Flink defines it, and notifications once per task."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tidemark.api import CheckpointedFunction, CheckpointListener, KeyedProcessFunction
from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness as Harness

BACKENDS = ["heap", "rocksdb"]
SEEN = ListStateDescriptor("seen")  # even-split: every value once, anywhere
EVERYWHERE = ListStateDescriptor("everywhere")  # union: every task has all
CONFIG = BroadcastStateDescriptor("config")  # broadcast: the same map on every task


class Recording(KeyedProcessFunction, CheckpointedFunction, CheckpointListener):
    """Records every lifecycle call in ``calls`` (shared by the tasks of one harness) and keeps
    the values it saw in operator state of each kind."""

    calls: list[tuple[str, Any]] = []

    def __init__(self) -> None:
        self.pending: list[Any] = []

    def initialize_state(self, ctx: Any) -> None:
        self.calls.append(("initialize_state", ctx.restored_checkpoint_id if ctx.is_restored() else None))
        self.seen = ctx.get_list_state(SEEN)
        self.everywhere = ctx.get_union_list_state(EVERYWHERE)
        self.config = ctx.get_broadcast_state(CONFIG)  # the same on every task: the function keeps it so
        if not ctx.is_restored():
            self.config.put("rules", ["a", "b"])
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def open(self, ctx: Any) -> None:
        self.calls.append(("open", None))

    def process(self, value: Any, ctx: Any) -> None:
        self.calls.append(("process", value))
        self.count.update(self.count.value() + 1)
        self.pending.append(value)

    def snapshot_state(self, ctx: Any) -> None:
        self.calls.append(("snapshot_state", ctx.checkpoint_id))
        assert ctx.checkpoint_timestamp_ms > 0
        self.seen.add_all(self.pending)
        self.everywhere.add_all(self.pending)
        self.pending = []

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self.calls.append(("notify_checkpoint_complete", checkpoint_id))

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:
        self.calls.append(("notify_checkpoint_aborted", checkpoint_id))

    def close(self) -> None:
        self.calls.append(("close", None))


def harness(parallelism: int, backend: str) -> Harness:
    Recording.calls = []
    return Harness.for_function(Recording, lambda value: value, parallelism=parallelism, state_backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_hooks_are_called_in_the_lifecycle_order(backend: str) -> None:
    with harness(1, backend) as first:
        first.process_all(["a", "b"])
        first.snapshot(1)
        first.notify_checkpoint_complete(1)
        first.process("c")
        snapshot = first.snapshot(2)
        first.notify_checkpoint_aborted(2)
    assert Recording.calls == [
        ("initialize_state", None), ("open", None), ("process", "a"), ("process", "b"),
        ("snapshot_state", 1), ("notify_checkpoint_complete", 1), ("process", "c"),
        ("snapshot_state", 2), ("notify_checkpoint_aborted", 2), ("close", None)]
    with harness(1, backend).restore(snapshot) as restored:
        assert Recording.calls[:2] == [("initialize_state", 2), ("open", None)]
        assert sorted(restored.functions[0].seen.get()) == ["a", "b", "c"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_operator_state_is_redistributed_on_rescale_2_3_2(backend: str) -> None:
    values = [f"v{i}" for i in range(20)]
    with harness(2, backend) as two:
        two.process_all(values)
        snapshot = two.snapshot()
    # union: every new task gets every old task's list, so once the 3 tasks each held all values,
    # each value comes back 3 times (a function keeps only its own items there, or expects this)
    for parallelism, copies in ((3, 1), (2, 3)):
        with harness(parallelism, backend).restore(snapshot) as restored:
            functions = restored.functions
            seen = [list(f.seen.get()) for f in functions]
            assert sorted(v for share in seen for v in share) == sorted(values)  # even-split: each item once
            assert max(map(len, seen)) - min(map(len, seen)) <= 1
            assert all(Counter(f.everywhere.get()) == {v: copies for v in values} for f in functions)
            assert all(dict(f.config.items()) == {"rules": ["a", "b"]} for f in functions)  # broadcast: a copy each
            snapshot = restored.snapshot()


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_task_hears_of_each_completed_checkpoint_once(backend: str) -> None:
    with harness(3, backend) as three:
        three.process_all(range(30))
        for checkpoint in (1, 2, 3):
            three.snapshot(checkpoint)
            three.notify_checkpoint_complete(checkpoint)
    notes = Counter(arg for call, arg in Recording.calls if call == "notify_checkpoint_complete")
    assert notes == {1: 3, 2: 3, 3: 3}
    assert Counter(arg for call, arg in Recording.calls if call == "snapshot_state") == {1: 3, 2: 3, 3: 3}


def test_a_function_may_not_use_the_runtimes_operator_state_names() -> None:
    class Greedy(KeyedProcessFunction, CheckpointedFunction):
        def initialize_state(self, ctx: Any) -> None:
            ctx.get_union_list_state(ListStateDescriptor("tidemark_sink_pending"))

        def snapshot_state(self, ctx: Any) -> None:
            pass

        def process(self, value: Any, ctx: Any) -> None:
            pass

    with pytest.raises(ValueError, match="names starting with 'tidemark_' are the runtime's"):
        Harness.for_function(Greedy, lambda value: value).open()


def test_a_plain_function_gets_no_hook() -> None:
    class Plain(KeyedProcessFunction):
        def process(self, value: Any, ctx: Any) -> None:
            ctx.emit(ctx.key, value)

    with Harness.for_function(Plain, lambda value: value) as plain:
        plain.process("x")
        plain.snapshot(1)
        plain.notify_checkpoint_complete(1)
        assert plain.output_values() == ["x"]
