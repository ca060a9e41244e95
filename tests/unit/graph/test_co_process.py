"""Two-input functions on the operator layer, through the harness: a KeyedCoProcessFunction's two
inputs, each keyed its own way, share the key's state and timers; the state survives snapshots and
rescaling on every backend; a one-input function over several inputs takes them all; a
CoProcessFunction without a key keeps operator state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidemark.api import (
    CheckpointedFunction,
    CoProcessFunction,
    Input,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    Stage,
)
from tidemark.state import ListStateDescriptor, ValueStateDescriptor
from tidemark.testing import KeyedProcessFunctionHarness

pytestmark = pytest.mark.unit
BACKENDS = ["heap", "rocksdb"]


class Enrich(KeyedCoProcessFunction):
    """Input 1: orders ``{"user", "amount"}``; input 2: users ``{"id", "name"}``. An order is
    joined with its user's latest name; one without a user waits in state until the user comes or
    its timer (10 s of event time) gives up on it."""

    def open(self, ctx: Any) -> None:
        self.name = ctx.get_state(ValueStateDescriptor("name"))
        self.waiting = ctx.get_state(ValueStateDescriptor("waiting", default=()))

    def process_element1(self, value: Any, ctx: Any) -> None:
        name = self.name.value()
        if name is not None:
            ctx.emit(ctx.key, {"user": ctx.key, "name": name, "amount": value["amount"]})
            return
        self.waiting.update((*self.waiting.value(), value["amount"]))
        ctx.timer_service().register_event_time_timer(ctx.timestamp_ms + 10_000)

    def process_element2(self, value: Any, ctx: Any) -> None:
        self.name.update(value["name"])
        for amount in self.waiting.value():
            ctx.emit(ctx.key, {"user": ctx.key, "name": value["name"], "amount": amount})
        self.waiting.clear()

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        for amount in self.waiting.value():
            ctx.emit(ctx.key, {"user": ctx.key, "name": None, "amount": amount})
        self.waiting.clear()


def _stage() -> Stage:
    return Stage("enrich", (Input("orders", key_by=lambda v: v["user"]),
                            Input("users", key_by=lambda v: v["id"])), None, Enrich, "enriched")


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_inputs_share_the_keys_state_and_timers(backend: str) -> None:
    with KeyedProcessFunctionHarness(_stage(), state_backend=backend, parallelism=2) as h:
        assert h.process({"user": "u1", "amount": 5}, timestamp_ms=1_000) == []
        assert h.timers("u1") == [11_000]
        assert [e.decoded() for e in h.process({"id": "u1", "name": "Ada"}, input=1)] == [
            {"user": "u1", "name": "Ada", "amount": 5}]
        assert [e.decoded() for e in h.process({"user": "u1", "amount": 7}, timestamp_ms=2_000)] == [
            {"user": "u1", "name": "Ada", "amount": 7}]
        h.process({"user": "u2", "amount": 1}, timestamp_ms=3_000)
        assert [e.decoded() for e in h.advance_watermark(13_000)] == [{"user": "u2", "name": None, "amount": 1}]
        assert [e.decoded() for e in h.advance_watermark(20_000)] == []  # u1's timer found nothing waiting
        assert h.state(ValueStateDescriptor("name"), "u1").value() == "Ada"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_shared_state_survives_a_savepoint_and_a_rescale_2_3_2(backend: str) -> None:
    users = [f"u{i}" for i in range(30)]
    with KeyedProcessFunctionHarness(_stage(), state_backend=backend, parallelism=2) as h:
        for i, user in enumerate(users):
            h.process({"user": user, "amount": i}, timestamp_ms=1_000)
            if i % 2:
                h.process({"id": user, "name": user.upper()}, input=1)
        snapshot = h.snapshot()
    for parallelism in (3, 2):
        with KeyedProcessFunctionHarness(_stage(), state_backend=backend, parallelism=parallelism).restore(snapshot) as h:
            snapshot = h.snapshot()
    with KeyedProcessFunctionHarness(_stage(), state_backend=backend, parallelism=2).restore(snapshot) as h:
        late = [e.decoded() for user in users[::2] for e in h.process({"id": user, "name": "late"}, input=1)]
        assert late == [{"user": u, "name": "late", "amount": int(u[1:])} for u in users[::2]]
        named = [e.decoded() for user in users[1::2] for e in h.process({"user": user, "amount": 100})]
        assert named == [{"user": u, "name": u.upper(), "amount": 100} for u in users[1::2]]
        assert h.advance_watermark(50_000) == []  # every waiting order was joined: the timers found nothing


def test_each_input_decodes_its_own_records() -> None:
    stage = Stage("enrich", (Input("orders", key_by=lambda v: v["user"]),
                             Input("users", key_by=lambda v: v["id"],
                                   decode=lambda k, v: dict(zip(("id", "name"), v.decode().split(","))))),
                  None, Enrich, "enriched")
    with KeyedProcessFunctionHarness(stage) as h:
        h.process_record(None, json.dumps({"user": "u1", "amount": 3}).encode(), timestamp_ms=0)
        assert [e.decoded() for e in h.process_record(None, b"u1,Ada", input=1)] == [
            {"user": "u1", "name": "Ada", "amount": 3}]
        with pytest.raises(ValueError, match="has 2 input"):
            h.process({"user": "u1"}, input=2)


class Count(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(ValueStateDescriptor("count", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        ctx.emit(ctx.key, self.count.value())


def test_a_one_input_function_over_several_inputs_takes_them_all_in_one_key_space() -> None:
    stage = Stage("count", ("a", Input("b", key_by=lambda v: v["id"]), "c"), lambda v: v["k"], Count, "out")
    with KeyedProcessFunctionHarness(stage) as h:
        h.process({"k": "x"})
        h.process({"id": "x"}, input=1)
        assert [e.decoded() for e in h.process({"k": "x"}, input=2)] == [3]


class Pair(CoProcessFunction, CheckpointedFunction):
    """Without a key: pairs the first input's values with the second's in arrival order, the
    unmatched ones in operator state."""

    def initialize_state(self, ctx: Any) -> None:
        self.lefts = ctx.get_list_state(ListStateDescriptor("lefts"))
        self.pending = list(self.lefts.get())

    def snapshot_state(self, ctx: Any) -> None:
        self.lefts.update(self.pending)

    def process_element1(self, value: Any, ctx: Any) -> None:
        self.pending.append(value)

    def process_element2(self, value: Any, ctx: Any) -> None:
        if self.pending:
            ctx.emit(None, [self.pending.pop(0), value])


def test_a_co_process_function_without_a_key_keeps_operator_state_across_a_restore() -> None:
    stage = Stage("pair", ("left", "right"), None, Pair, "pairs")
    with KeyedProcessFunctionHarness(stage) as h:
        h.process("a")
        h.process("b")
        assert [e.decoded() for e in h.process(1, input=1)] == [["a", 1]]
        snapshot = h.snapshot()
    with KeyedProcessFunctionHarness(stage).restore(snapshot) as h:
        assert [e.decoded() for e in h.process(2, input=1)] == [["b", 2]]
        assert h.process(3, input=1) == []


def test_for_function_gives_a_two_input_function_two_inputs() -> None:
    with KeyedProcessFunctionHarness.for_function(Enrich, (lambda v: v["user"], lambda v: v["id"])) as h:
        h.process({"user": "u", "amount": 1}, timestamp_ms=0)
        assert [e.decoded()["name"] for e in h.process({"id": "u", "name": "N"}, input=1)] == ["N"]
