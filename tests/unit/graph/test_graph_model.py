"""A job is a directed acyclic graph of stages: what a valid graph is, the one-line refusals of
invalid ones, and the graph as it runs (exchange readers in front of stages that read the job's
input topics with other stages' outputs, or keyed on several workers)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidemark.api import (
    EventTime,
    Input,
    JobSpec,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    ProcessFunction,
    Stage,
)
from tidemark.runtime.job.physical_plan import READER_SUFFIX, physical_job, reader_workers, workers_per_stage

pytestmark = pytest.mark.unit


class Pass(KeyedProcessFunction):
    def process(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, value)


class Both(KeyedCoProcessFunction):
    def process_element1(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, value)

    def process_element2(self, value: Any, ctx: Any) -> None:
        ctx.emit(ctx.key, value)


class Sink(ProcessFunction):
    def process(self, value: Any, ctx: Any) -> None:
        pass


def _key(value: Any) -> Any:
    return value["k"]


def csv(key: bytes | None, value: bytes | None) -> dict[str, Any]:
    k, n = (value or b"").decode().split(",")
    return {"k": k, "n": int(n)}


def _graph(**options: Any) -> JobSpec:
    """Fan-out and fan-in, declared out of data-flow order: a -> (b, c) -> d; d also reads topic "side"."""
    return JobSpec("g", (
        Stage("d", ("b.out", "c.out", Input("side", decode=csv)), _key, Pass, "d.out"),
        Stage("b", ("a.out",), _key, Pass, "b.out"),
        Stage("c", ("a.out",), _key, Pass, "c.out"),
        Stage("a", ("in",), _key, Pass, "a.out"),
    ), **options)


def test_a_graph_with_a_fan_out_and_a_fan_in_in_any_order() -> None:
    spec = _graph()
    a, b, c, d = (spec.stage(n) for n in "abcd")
    assert spec.upstreams_of(d) == (b, c) and spec.readers_of(a) == (b, c)
    assert spec.is_source(a) and not spec.is_source(d) and spec.is_channel(a) and not spec.is_channel(d)
    assert spec.input_topics() == ["in", "side"]
    assert d.topics == ("b.out", "c.out", "side") and d.decode_of(d.input_list[2]) is csv


@pytest.mark.parametrize(("stages", "message"), [
    ((Stage("a", ("b.out",), _key, Pass, "a.out"), Stage("b", ("a.out",), _key, Pass, "b.out")),
     "stages a -> b -> a form a cycle"),
    ((Stage("a", ("in", "a.out"), _key, Pass, "a.out"),), "stage a reads its own output a.out"),
    ((Stage("a", ("in",), _key, Pass, "out"), Stage("b", ("in",), _key, Pass, "out")),
     "stages a and b both write out"),
])
def test_an_invalid_graph_is_refused_in_one_line(stages: tuple[Stage, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        JobSpec("g", stages)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Stage("s", (), _key, Pass, "out"), "stage s: reads nothing"),
    (lambda: Stage("s", "in", _key, Pass, "out"), "inputs is a tuple"),
    (lambda: Stage("s", ("in", Input("in")), _key, Pass, "out"), r"reads a topic twice: \['in'\]"),
    (lambda: Stage("s", (Input("a", key_by=_key), "b"), None, Pass, "out"),
     r"a keyed stage keys every input: give key_by to the stage or to input\(s\) \['b'\]"),
    (lambda: Stage("s", ("a",), _key, Both, "out"), "Both takes two inputs, the stage has 1"),
    (lambda: Stage("s", ("a", "b", "c"), _key, Both, "out"), "Both takes two inputs, the stage has 3"),
])
def test_an_invalid_stage_is_refused_in_one_line(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_inputs_that_disagree_on_event_time_are_refused() -> None:
    timed = EventTime(timestamp=lambda v: v["ts"])
    with pytest.raises(ValueError, match=r"stage s: inputs \['a'\] have event time and \['b'\] not"):
        JobSpec("g", (Stage("s", (Input("a", event_time=timed), "b"), _key, Pass, "out"),))
    with pytest.raises(ValueError, match=r"stage d: inputs \['b'\] have event time and \['c'\] not"):
        JobSpec("g", (Stage("b", ("x",), _key, Pass, "b.out", event_time=timed),
                      Stage("c", ("y",), _key, Pass, "c.out"),
                      Stage("d", ("b.out", "c.out"), _key, Pass, "d.out")))
    spec = JobSpec("g", (Stage("b", (Input("x", event_time=timed),), _key, Pass, "b.out"),
                         Stage("c", ("y",), _key, Pass, "c.out", event_time=timed),
                         Stage("d", ("b.out", "c.out"), _key, Pass, "d.out")))
    assert spec.event_time_of(spec.stage("d")) is timed


def test_a_two_input_function_made_by_a_factory_is_checked_when_its_operator_is_built() -> None:
    from tidemark.testing import KeyedProcessFunctionHarness
    stage = Stage("s", ("a",), _key, lambda: Both(), "out")  # a factory: its function is known once made
    with pytest.raises(ValueError, match="Both takes two inputs, the stage has 1"):
        KeyedProcessFunctionHarness(stage)


def test_a_stage_reading_input_topics_and_channels_reads_the_topics_through_an_exchange() -> None:
    spec = _graph()
    workers = reader_workers(spec, workers_per_stage(spec, 2), {"in": 4, "side": 2}, 2)
    running = physical_job(spec, workers, lambda s: f"x.exchange.{s}")
    reader = running.stage("d" + READER_SUFFIX)
    d = running.stage("d")
    assert reader.forwards_to == "d" and reader.topics == ("side",) and reader.output == "x.exchange.d"
    assert reader.decode_of(reader.input_list[0]) is csv and reader.key_of(reader.input_list[0]) is _key
    assert d.exchange == "x.exchange.d" and d.exchanged == ("side",)
    assert d.topics == ("x.exchange.d", "b.out", "c.out") and d.inputs == spec.stage("d").inputs
    assert running.upstreams_of(d) == (reader, running.stage("b"), running.stage("c"))
    assert running.is_source(reader) and not running.is_source(d)
    # one worker each, inputs of one kind: as written
    assert [s.name for s in running.stages] == ["d.read", "d", "b", "c", "a"]
    assert all(running.stage(name).exchange is None for name in "abc")


def test_a_keyed_stage_over_two_input_topics_on_two_workers_forwards_both_through_one_exchange() -> None:
    timed = EventTime(timestamp=lambda v: v["ts"], max_out_of_orderness_ms=5)
    spec = JobSpec("g", (Stage("join", (Input("left", event_time=timed), Input("right", decode=csv)), _key, Both,
                               "out", event_time=EventTime(max_out_of_orderness_ms=9)),), workers=2)
    workers = reader_workers(spec, workers_per_stage(spec, 4), {"left": 1, "right": 3}, 4)
    assert workers == {"join": 2, "join.read": 2}
    running = physical_job(spec, workers, lambda s: f"x.{s}")
    reader, join = running.stages
    assert reader.topics == ("left", "right") and join.topics == ("x.join",) and join.exchanged == ("left", "right")
    assert [reader.event_time_of(i) for i in reader.input_list] == [timed, EventTime(max_out_of_orderness_ms=9)]
    assert [reader.decode_of(i).__name__ for i in reader.input_list] == ["json_decode", "csv"]


def test_a_stage_without_a_key_over_two_channels_gets_no_more_workers_than_their_partitions() -> None:
    spec = JobSpec("g", (Stage("a", ("in",), _key, Pass, "a.out"), Stage("b", ("in2",), _key, Pass, "b.out"),
                         Stage("sink", ("a.out", "b.out"), None, Sink, "sink.out", workers=16)),
                   parallelism=16, output_partitions=3)
    assert reader_workers(spec, workers_per_stage(spec, 16), {"in": 1, "in2": 1}, 16)["sink"] == 6


def test_records_of_every_input_decode_as_that_input_says() -> None:
    stage = Stage("s", ("a", Input("b", decode=csv, key_by=lambda v: v["k"].upper())), _key, Both, "out")
    first, second = stage.input_list
    assert stage.decode_of(first)(None, json.dumps({"k": "x"}).encode()) == {"k": "x"}
    assert stage.decode_of(second)(None, b"y,3") == {"k": "y", "n": 3}
    assert stage.key_of(first)({"k": "x"}) == "x" and stage.key_of(second)({"k": "y"}) == "Y"
