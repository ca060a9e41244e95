"""Broadcast state (#35 point 3) on the runtime's own tasks: a broadcast input's elements reach
every task, ``process_broadcast_element`` writes the broadcast state and visits the keyed state
(``apply_to_keyed_state``), ``process_element`` and ``on_timer`` read it; it is checkpointed,
identical on every task, and restored as one copy per new task through savepoints at 2 -> 3 -> 2;
the record path hands a broadcast element to every task (an exchange's copy once per worker);
the graph's rules refuse what a broadcast input cannot be."""

from __future__ import annotations

import json
from typing import Any

import pytest

from record_paths import record_path
from tidemark.api import (
    BroadcastProcessFunction,
    Input,
    JobSpec,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    Stage,
)
from tidemark.runtime.job.physical_plan import READER_SUFFIX, physical_job, reader_workers
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.outputs import EVERY_PARTITION
from tidemark.state import BroadcastStateDescriptor, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness
from tidemark.types import Epoch, TaskId

pytestmark = pytest.mark.unit

LIMITS = BroadcastStateDescriptor("limits")
SPENT = ValueStateDescriptor("spent", default=0)


class Limits(KeyedBroadcastProcessFunction):
    """Per account: spending so far; a broadcast rule sets a category's limit, and resets every
    account's spending when it says so; an account over its category's limit is flagged."""

    def open(self, ctx: Any) -> None:
        self.spent = ctx.get_state(SPENT)

    def process_element(self, value: Any, ctx: Any) -> None:
        self.spent.update(self.spent.value() + value["amount"])
        limit = ctx.get_broadcast_state(LIMITS).get(value["category"])
        if limit is not None and self.spent.value() > limit:
            ctx.emit(ctx.key, {"account": ctx.key, "over": limit, "spent": self.spent.value()})
        ctx.timer_service().register_event_time_timer(value["t"] + 10)

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.get_broadcast_state(LIMITS).put(value["category"], value["limit"])
        if value.get("reset"):
            ctx.apply_to_keyed_state(SPENT, lambda key, state: state.clear())
        ctx.emit(None, {"rule": value["category"], "at": ctx.timestamp_ms})

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        rules = ctx.get_broadcast_state(LIMITS)
        ctx.emit(ctx.key, {"timer": timestamp_ms, "rules": sorted(rules.keys())})


def _harness(parallelism: int, backend: str = "heap") -> KeyedProcessFunctionHarness:
    return KeyedProcessFunctionHarness.for_function(Limits, lambda v: v["account"], parallelism=parallelism,
                                                    state_backend=backend)


ACCOUNTS = [f"acct-{n}" for n in range(40)]


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_broadcast_element_reaches_every_task_and_the_keyed_side_reads_it(backend: str) -> None:
    with _harness(3, backend) as harness:
        emitted = harness.process({"category": "food", "limit": 25}, input=1, timestamp_ms=7)
        assert [json.loads(e.value) for e in emitted] == [{"rule": "food", "at": 7}] * 3  # once per task
        assert harness.broadcast_state(LIMITS) == [{"food": 25}] * 3
        for account in ACCOUNTS:
            harness.process({"account": account, "category": "food", "amount": 20, "t": 100})
        assert not harness.output_values()[3:]
        for account in ACCOUNTS:
            harness.process({"account": account, "category": "food", "amount": 10, "t": 101})
        flagged = [v for v in harness.output_values() if "over" in v]
        assert sorted(v["account"] for v in flagged) == sorted(ACCOUNTS)
        assert all(v == {"account": v["account"], "over": 25, "spent": 30} for v in flagged)
        harness.clear_output()
        timers = harness.advance_watermark(111)
        assert sorted(json.loads(e.value)["timer"] for e in timers) == [110] * 40 + [111] * 40
        assert all(json.loads(e.value)["rules"] == ["food"] for e in timers)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_apply_to_keyed_state_visits_every_key_of_every_task(backend: str) -> None:
    with _harness(2, backend) as harness:
        for account in ACCOUNTS:
            harness.process({"account": account, "category": "fuel", "amount": 5, "t": 0})
        harness.process({"category": "fuel", "limit": 7, "reset": True}, input=1)
        assert all(harness.state(SPENT, account).value() == 0 for account in ACCOUNTS)
        harness.clear_output()
        for account in ACCOUNTS:
            harness.process({"account": account, "category": "fuel", "amount": 5, "t": 0})
        assert not [v for v in harness.output_values() if "over" in v]  # 5 <= 7 again after the reset


class Writes(KeyedBroadcastProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.get_broadcast_state(LIMITS).put("x", 1)

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.get_state(SPENT)


def test_the_keyed_side_cannot_write_the_broadcast_state_nor_the_broadcast_side_take_a_key() -> None:
    with KeyedProcessFunctionHarness.for_function(Writes, lambda v: v) as harness:
        with pytest.raises(AttributeError):
            harness.process("k")
        with pytest.raises(AttributeError):  # no key, so no keyed state: only apply_to_keyed_state
            harness.process("rule", input=1)


def _savepoint_round(backend: str) -> None:
    """2 -> 3 -> 2 tasks through savepoints, rules and keyed state on the way."""
    with _harness(2, backend) as two:
        two.process({"category": "food", "limit": 25}, input=1)
        two.process({"category": "fuel", "limit": 40}, input=1)
        for account in ACCOUNTS:
            two.process({"account": account, "category": "food", "amount": 20, "t": 1})
        first = two.snapshot()
    three = _harness(3, backend).restore(first)
    with three:
        assert three.broadcast_state(LIMITS) == [{"food": 25, "fuel": 40}] * 3  # one copy per new task
        three.process({"category": "food", "limit": 15}, input=1)
        three.clear_output()
        for account in ACCOUNTS:
            three.process({"account": account, "category": "food", "amount": 1, "t": 2})
        assert sorted(v["account"] for v in three.output_values() if "over" in v) == sorted(ACCOUNTS)
        second = three.snapshot()
    again = _harness(2, backend).restore(second)
    with again:
        assert again.broadcast_state(LIMITS) == [{"food": 15, "fuel": 40}] * 2
        assert all(again.state(SPENT, account).value() == 21 for account in ACCOUNTS)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_broadcast_state_survives_a_rescale_2_3_2_through_savepoints_identical_on_every_task(backend: str) -> None:
    _savepoint_round(backend)


class Tags(BroadcastProcessFunction):
    """No key: tags each record with the broadcast tag of its kind."""

    def process_element(self, value: Any, ctx: Any) -> None:
        ctx.emit(None, [value, ctx.get_broadcast_state(LIMITS).get(value)])

    def process_broadcast_element(self, value: Any, ctx: Any) -> None:
        ctx.get_broadcast_state(LIMITS).put(value[0], value[1])


def test_a_stage_without_a_key_runs_a_broadcast_process_function() -> None:
    with KeyedProcessFunctionHarness.for_function(Tags, None, parallelism=2) as harness:
        harness.process(["a", "A"], input=1)
        assert harness.process("a", partition=1)[0].decoded() == ["a", "A"]
        assert harness.process("b", partition=0)[0].decoded() == ["b", None]
        snapshot = harness.snapshot()
    restored = KeyedProcessFunctionHarness.for_function(Tags, None, parallelism=3).restore(snapshot)
    with restored:
        assert restored.broadcast_state(LIMITS) == [{"a": "A"}] * 3


# ---------------------------------------------------------------- the graph's rules


def _rules(key: bytes | None, value: bytes | None) -> Any:
    return json.loads(value or b"null")


def test_a_broadcast_input_has_no_key_and_goes_to_a_broadcast_function() -> None:
    with pytest.raises(ValueError, match="a broadcast input goes to every task, so it has no key_by"):
        Input("rules", key_by=lambda v: v, broadcast=True)
    with pytest.raises(ValueError, match="go to a BroadcastProcessFunction"):
        Stage("s", ("tx", Input("rules", broadcast=True)), lambda v: v, _Plain, "out")
    with pytest.raises(ValueError, match="reads its own input first and a broadcast input second"):
        Stage("s", (Input("rules", broadcast=True), "tx"), lambda v: v, Limits, "out")
    with pytest.raises(ValueError, match="reads its own input first and a broadcast input second"):
        Stage("s", ("tx", "rules"), lambda v: v, Limits, "out")
    stage = Stage("s", (Input("tx", key_by=lambda v: v["account"]), Input("rules", broadcast=True)), None,
                  Limits, "out")  # the broadcast input needs no key in a keyed stage
    assert stage.keyed and stage.broadcast_side == 1 and stage.key_of(stage.input_list[1]) is None


class _Plain(KeyedProcessFunction):
    def process(self, value: Any, ctx: Any) -> None:
        pass


def _job(workers: int, keyed: bool = True) -> JobSpec:
    function = Limits if keyed else Tags
    return JobSpec("j", (Stage("s", ("tx", Input("rules", decode=_rules, broadcast=True)),
                               (lambda v: v["account"]) if keyed else None, function, "out"),), workers=workers)


def test_on_several_workers_a_broadcast_input_goes_through_the_exchange() -> None:
    for keyed in (True, False):
        spec = _job(2, keyed)
        workers = reader_workers(spec, {"s": 2}, {"tx": 4, "rules": 1}, spec.parallelism)
        physical = physical_job(spec, workers, lambda stage: f"exchange.{stage}")
        reader, stage = physical.stage("s" + READER_SUFFIX), physical.stage("s")
        assert [(i.topic, i.broadcast) for i in reader.input_list] == [("tx", False), ("rules", True)]
        assert reader.key_of(reader.input_list[1]) is None and stage.exchanged == ("tx", "rules")
    one = physical_job(_job(1), {"s": 1}, lambda stage: f"exchange.{stage}")
    assert [s.name for s in one.stages] == ["s"]  # one worker reads both topics itself
    assert reader_workers(_job(8, keyed=False), {"s": 8}, {"tx": 16, "rules": 1}, 8)["s"] == 4  # every worker
    # reads a share of each channel: no more workers than a channel has partitions (output_partitions)


# ---------------------------------------------------------------- the record path


def _record(topic: str, value: bytes, partition: int = 0, origin: str | None = None) -> InputRecord:
    return InputRecord(topic, partition, 0, 0, None, value, Epoch(1), TaskId("up#0"), origin=origin)


def test_the_record_path_hands_a_broadcast_element_to_every_task_and_an_exchange_copy_once(tmp_path) -> None:
    stage = Stage("s", (Input("tx", key_by=lambda v: v["account"]), Input("rules", broadcast=True)), None, Limits,
                  "out", exchange="exchange.s", exchanged=("tx", "rules"))
    path, tasks, failures = record_path(stage, tmp_path, {"exchange.s": 2})
    rule = b'{"category": "food", "limit": 3}'
    path.process(_record("exchange.s", rule, partition=3, origin="rules"))  # another partition's copy
    assert all(t.operator_state.get_broadcast_state(LIMITS).is_empty() for t in tasks)
    path.process(_record("exchange.s", rule, partition=2, origin="rules"))
    assert [dict(t.operator_state.get_broadcast_state(LIMITS).items()) for t in tasks] == [{"food": 3}] * 2
    path.process(_record("exchange.s", b"not json", partition=2, origin="rules"))
    assert len(failures.failed) == 1 and failures.failed[0][0].origin == "rules"


def test_an_exchange_reader_forwards_a_broadcast_element_into_every_partition(tmp_path) -> None:
    reader = Stage("s.read", (Input("tx", key_by=lambda v: v["account"]), Input("rules", broadcast=True)),
                   lambda v: v, _Plain, "exchange.s", forwards_to="s")
    path, tasks, _ = record_path(reader, tmp_path)
    forward = path.forwarder(None)
    forward(_record("rules", b'{"category": "food", "limit": 3}'))
    forward(_record("tx", b'{"account": "a"}'))
    routed = [r for t in tasks for r in t.take_output()]
    assert sorted(((r[4], r[3]) for r in routed), key=str) == [("rules", EVERY_PARTITION), ("tx", None)]  # type: ignore[misc]
