"""The record path of a stage with several inputs, on the runtime's own tasks: each record is
decoded and keyed as its input says and handed to that input's side of a two-input function; an
exchange's records are known by the input topic they name; a record naming an input the stage does
not read goes to the error policy with its origin."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from record_paths import record_path
from tidemark.api import Input, KeyedCoProcessFunction, KeyedProcessFunction, Stage
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.task import StageTask
from tidemark.types import Epoch, TaskId

pytestmark = pytest.mark.unit


class Sides(KeyedCoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, ["first", value])

    def process_element2(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, ["second", value])


def _csv(key: bytes | None, value: bytes | None) -> Any:
    return (value or b"").decode().split(",")


class _OneInput(KeyedProcessFunction):
    def process(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, value)


def _emitted(tasks: list[StageTask]) -> list[Any]:
    return [json.loads(value) for task in tasks for _, value, _ in task.take_output()]


def _record(topic: str, value: bytes, origin: str | None = None) -> InputRecord:
    return InputRecord(topic, 0, 0, 0, None, value, Epoch(1), TaskId("up#0"), origin=origin)


def test_each_channel_is_its_inputs_side(tmp_path) -> None:
    stage = Stage("s", (Input("a.out", key_by=lambda v: v["k"]), Input("b.out", decode=_csv, key_by=lambda v: v[0])),
                  None, Sides, "out")
    path, tasks, failures = record_path(stage, tmp_path)
    path.process(_record("a.out", b'{"k": "x"}'))
    path.process(_record("b.out", b"x,1"))
    assert _emitted(tasks) == [["first", {"k": "x"}], ["second", ["x", "1"]]]
    path.process(_record("a.out", b"x,1"))  # not JSON: its input's decode refuses it
    assert [(r.topic, type(e).__name__) for r, e in failures.failed] == [("a.out", "MalformedInput")]


def test_an_exchanges_records_are_known_by_the_input_they_name(tmp_path) -> None:
    stage = dataclasses.replace(
        Stage("s", (Input("orders", key_by=lambda v: v["k"]), Input("users", decode=_csv, key_by=lambda v: v[0])),
              None, Sides, "out"),
        exchange="x.exchange.s", exchanged=("orders", "users"))
    assert stage.topics == ("x.exchange.s",)
    path, tasks, failures = record_path(stage, tmp_path)
    path.process(_record("x.exchange.s", b"y,2", origin="users"))
    path.process(_record("x.exchange.s", b'{"k": "y"}', origin="orders"))
    assert _emitted(tasks) == [["second", ["y", "2"]], ["first", {"k": "y"}]]
    path.process(_record("x.exchange.s", b'{"k": "y"}', origin="refunds"))
    path.process(_record("x.exchange.s", b'{"k": "y"}'))  # an exchange of two inputs: it must name one
    assert [str(e) for _, e in failures.failed] == [
        "malformed-input: ValueError: the record names input 'refunds', which stage s does not read",
        "malformed-input: ValueError: the record names input None, which stage s does not read"]


def test_an_exchange_record_from_before_records_named_their_input_is_its_only_inputs(tmp_path) -> None:
    stage = dataclasses.replace(Stage("s", ("orders",), lambda v: v["k"], _OneInput, "out"),
                                exchange="x.exchange.s", exchanged=("orders",))
    path, tasks, failures = record_path(stage, tmp_path)
    path.process(_record("x.exchange.s", b'{"k": "z"}'))
    assert _emitted(tasks) == [{"k": "z"}] and not failures.failed
