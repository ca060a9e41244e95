"""A stage without a key (``key_by=None``): its ProcessFunction gets each record on the task of
the record's input partition, keeps operator state only (keyed state and timers refuse in one
line), and that state is redistributed on rescale 2 -> 3 -> 2 as Flink defines it; the physical
plan gives such a stage no exchange and no more workers than partitions."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tidemark.api import CheckpointedFunction, JobSpec, ProcessFunction, Stage
from tidemark.runtime.job.physical_plan import physical_job, reader_workers
from tidemark.state import BroadcastStateDescriptor, ListStateDescriptor, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness as Harness

SEEN = ListStateDescriptor("seen")
EVERYWHERE = ListStateDescriptor("everywhere")
CONFIG = BroadcastStateDescriptor("config")


class Buffer(ProcessFunction, CheckpointedFunction):
    """Emits each value with the task's running count; keeps what it saw in operator state."""

    def initialize_state(self, ctx: Any) -> None:
        self.seen = ctx.get_list_state(SEEN)
        self.everywhere = ctx.get_union_list_state(EVERYWHERE)
        self.config = ctx.get_broadcast_state(CONFIG)
        if not ctx.is_restored():
            self.config.put("sink", "table")
        self.pending: list[str] = []

    def process(self, value: Any, ctx: Any) -> None:
        assert ctx.key is None
        self.pending.append(value)
        ctx.emit(None, {"value": value, "count": len(self.pending) + len(self.seen.get())})

    def snapshot_state(self, ctx: Any) -> None:
        self.seen.add_all(self.pending)
        self.everywhere.add_all(self.pending)
        self.pending = []


def _harness(parallelism: int, backend: str = "heap") -> Harness:
    return Harness.for_function(Buffer, None, name="buffer", parallelism=parallelism, state_backend=backend)


def test_records_go_to_the_task_of_their_partition() -> None:
    with _harness(2) as two:
        for partition, value in enumerate("abcd"):
            two.process(value, partition=partition)
        tasks = [record.task for record in two.output]
        assert tasks == [two.tasks[0].task_id, two.tasks[1].task_id] * 2
        assert [record.key for record in two.output] == [None] * 4


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_operator_state_is_redistributed_on_rescale_2_3_2(backend: str) -> None:
    values = [f"v{i}" for i in range(20)]
    with _harness(2, backend) as two:
        for i, value in enumerate(values):
            two.process(value, partition=i)
        snapshot = two.snapshot()
    for parallelism, copies in ((3, 1), (2, 3)):
        with _harness(parallelism, backend).restore(snapshot) as restored:
            functions = restored.functions
            seen = [list(f.seen.get()) for f in functions]
            assert sorted(v for share in seen for v in share) == sorted(values)  # even-split: each once
            assert max(map(len, seen)) - min(map(len, seen)) <= 1
            assert all(Counter(f.everywhere.get()) == {v: copies for v in values} for f in functions)  # union
            assert all(dict(f.config.items()) == {"sink": "table"} for f in functions)  # broadcast
            snapshot = restored.snapshot()


def test_keyed_state_and_timers_refuse_in_one_line() -> None:
    class WantsKeyedState(ProcessFunction):
        def open(self, ctx: Any) -> None:
            ctx.get_state(ValueStateDescriptor("count", default=0))

        def process(self, value: Any, ctx: Any) -> None:
            pass

    class WantsTimers(ProcessFunction):
        def process(self, value: Any, ctx: Any) -> None:
            ctx.timer_service().register_event_time_timer(1)

    with pytest.raises(RuntimeError, match=r"keyed state 'count': stage 'f' has no key \(key_by=None\)"):
        Harness.for_function(WantsKeyedState, None, name="f").open()
    with Harness.for_function(WantsTimers, None, name="f") as harness, \
            pytest.raises(RuntimeError, match=r"timers: stage 'f' has no key"):
        harness.process("x")


def test_a_stage_without_a_key_needs_no_exchange_and_no_more_workers_than_partitions() -> None:
    spec = JobSpec("j", (Stage("count", ("in",), lambda v: v, Buffer, "mid"),
                         Stage("sink", ("mid",), None, Buffer, "out")), parallelism=8, output_partitions=4)
    source = JobSpec("s", (Stage("sink", ("in",), None, Buffer, "out"),), parallelism=8)
    workers = reader_workers(source, {"sink": 4}, {"in": 3}, source.parallelism)
    assert workers == {"sink": 3}
    plan = physical_job(source, workers, lambda stage: f"exchange.{stage}")
    assert [(s.name, s.topics, s.workers) for s in plan.stages] == [("sink", ("in",), 3)]
    assert reader_workers(spec, {"count": 1, "sink": 6}, {"in": 4}, spec.parallelism)["sink"] == 4  # the channel's partitions
