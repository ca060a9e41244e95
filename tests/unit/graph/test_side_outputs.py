"""Side outputs (``Stage.side_outputs``, ``ctx.output(tag, value)``): what a stage may declare, the
one-line refusals of what it may not, and what a function writes to them from every place it can
write (a record, a timer, a broadcast element, a window), through the harness's real tasks and
operators: each side output gets its records in order, a record or timer that fails takes back
what it wrote there too, and a name the stage does not declare is refused when written."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.api import (
    Input,
    JobSpec,
    KeyedBroadcastProcessFunction,
    KeyedProcessFunction,
    OutputTag,
    Stage,
)
from tidemark.runtime.job.physical_plan import READER_SUFFIX, physical_job, reader_workers, workers_per_stage
from tidemark.runtime.worker.outputs import PendingBuffer
from tidemark.testing.harness import KeyedProcessFunctionHarness
from tidemark.types import CheckpointId, TaskId
from tidemark.windows import ProcessWindowFunction, TumblingWindows, Windowed

pytestmark = pytest.mark.unit

LARGE = OutputTag("large")
AUDIT = OutputTag("audit")


class Route(KeyedProcessFunction):
    """Small amounts to the output, large ones to the side output ``large`` (a negative amount
    raises after writing there); a timer at each record's time writes an audit line."""

    def process(self, value: Any, ctx: Any) -> None:
        if value["amount"] >= 100:
            ctx.output(LARGE, value, key=ctx.key)
            if value.get("fail"):
                raise ValueError("refused after writing to a side output")
        else:
            ctx.emit(ctx.key, value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp_ms)

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        ctx.output("audit", {"account": ctx.key, "at": timestamp_ms})


def _stage(inputs: tuple[str, ...] = ("payments",), **options: Any) -> Stage:
    return Stage("route", inputs, lambda v: v["account"], Route, "small",
                 side_outputs={"large": "large-payments", "audit": "payment-audit"}, **options)


def test_a_function_writes_each_side_output_in_order_from_records_and_timers() -> None:
    with KeyedProcessFunctionHarness(_stage(), parallelism=2) as harness:
        for n, amount in enumerate((5, 150, 7, 300)):
            harness.process({"account": f"a{n % 2}", "amount": amount}, timestamp_ms=1_000 + n)
        harness.advance_watermark(2_000)
        assert [v["amount"] for v in harness.output_values()] == [5, 7]
        large = harness.side_output(LARGE)
        assert [r.decoded()["amount"] for r in large] == [150, 300]
        assert [r.key for r in large] == [b"a1", b"a1"] and [r.timestamp_ms for r in large] == [1_001, 1_003]
        assert sorted((r.decoded()["account"], r.decoded()["at"]) for r in harness.side_output("audit")) == [
            ("a0", 1_000), ("a0", 1_002), ("a1", 1_001), ("a1", 1_003)]
        assert all(r.key is None for r in harness.side_output(AUDIT))
        harness.clear_output()
        assert harness.side_output(LARGE) == [] and harness.output == []


def test_a_failed_record_takes_back_what_it_wrote_to_a_side_output() -> None:
    with KeyedProcessFunctionHarness(_stage()) as harness:
        with pytest.raises(ValueError, match="refused after"):
            harness.process({"account": "a", "amount": 500, "fail": True})
        harness.process({"account": "a", "amount": 200})
        assert [r.decoded()["amount"] for r in harness.side_output(LARGE)] == [200]


def test_a_side_output_the_stage_does_not_declare_is_refused_when_written() -> None:
    class Stray(KeyedProcessFunction):
        def process(self, value: Any, ctx: Any) -> None:
            ctx.output("elsewhere", value)

    with KeyedProcessFunctionHarness.for_function(Stray, lambda v: v, side_outputs=[LARGE]) as harness:
        with pytest.raises(ValueError, match=r"stage 'function' has no side output 'elsewhere' \(its side_outputs: "
                                             r"\['large'\]\)"):
            harness.process(1)
        with pytest.raises(KeyError, match="no side output 'elsewhere'"):
            harness.side_output("elsewhere")


def test_every_task_writes_a_broadcast_elements_side_output() -> None:
    class Rules(KeyedBroadcastProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> None:
            ctx.emit(ctx.key, value)

        def process_broadcast_element(self, value: Any, ctx: Any) -> None:
            ctx.output(AUDIT, {"rule": value})

    with KeyedProcessFunctionHarness.for_function(Rules, lambda v: v, side_outputs=[AUDIT], parallelism=3) as harness:
        harness.process("r1", input=1)
        assert sorted(r.task for r in harness.side_output(AUDIT)) == ["function#0", "function#1", "function#2"]


def test_a_window_function_writes_side_outputs() -> None:
    class Count(ProcessWindowFunction):
        def process(self, key: Any, elements: Any, ctx: Any) -> None:
            count = len(list(elements))
            if count > 1:
                ctx.output("busy", count, key=key)
            else:
                ctx.emit(key, count)

    stage = Stage("windows", ("clicks",), lambda v: v["user"],
                  Windowed(TumblingWindows(1_000), process=Count), "quiet", side_outputs={"busy": "busy"})
    with KeyedProcessFunctionHarness(stage) as harness:
        for user, at in (("u1", 10), ("u1", 20), ("u2", 30)):
            harness.process({"user": user}, timestamp_ms=at)
        harness.advance_watermark(1_000)
        assert harness.output_values() == [1]
        assert [(r.key, r.decoded(), r.timestamp_ms) for r in harness.side_output("busy")] == [(b"u1", 2, 999)]


@pytest.mark.parametrize("options, refusal", [
    ({"side_outputs": {"large": "small"}}, "side output 'large' writes small, which is its output"),
    ({"side_outputs": {"large": "payments"}}, "side output 'large' writes payments, which is one of its inputs"),
    ({"side_outputs": {"a": "t", "b": "t"}}, "side output 'a' writes t, which is another side output"),
    ({"side_outputs": {"bad name": "t"}}, "side output name 'bad name': a letter or digit"),
    ({"side_outputs": {"large": ""}}, "side output 'large' names a topic, got ''"),
])
def test_a_stage_refuses_side_outputs_that_are_not_topics_of_their_own(options: dict, refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        Stage("route", ("payments",), lambda v: v["account"], Route, "small", **options)


def test_a_job_refuses_a_side_output_written_twice_or_in_a_cycle() -> None:
    first = _stage()
    with pytest.raises(ValueError, match="stages route and copy both write large-payments"):
        JobSpec("j", (first, Stage("copy", ("other",), None, Route, "large-payments")))
    with pytest.raises(ValueError, match="stages route -> review -> route form a cycle"):
        JobSpec("j", (_stage(inputs=("payments", "reviewed")),
                      Stage("review", ("large-payments",), lambda v: v["account"], Route, "reviewed")))


def test_a_side_output_another_stage_reads_is_a_channel_of_the_graph() -> None:
    review = Stage("review", (Input("large-payments"), "small"), lambda v: v["account"], Route, "reviewed")
    job = JobSpec("j", (_stage(), review))
    route = job.stage("route")
    assert job.writer_of("large-payments") is route and job.writer_of("payments") is None
    assert job.upstreams_of(review) == (route,) and not job.is_source(review)
    assert job.is_channel_topic("large-payments") and not job.is_channel_topic("payment-audit")
    assert job.readers_of_topic("large-payments") == (review,)
    assert job.input_topics() == ["payments"]  # the side output is no input of the job
    assert route.output_topics == ("small", "payment-audit", "large-payments")


def test_side_outputs_are_kept_in_name_order_and_an_output_tag_checks_its_name() -> None:
    stage = _stage()
    assert stage.side_outputs == (("audit", "payment-audit"), ("large", "large-payments"))
    assert stage.side_output_topics == {"audit": "payment-audit", "large": "large-payments"}
    with pytest.raises(ValueError, match="side output name ''"):
        OutputTag("")


def test_a_side_outputs_buffer_names_it_and_a_buffer_without_a_name_is_the_stages() -> None:
    buffer = PendingBuffer(TaskId("route#0"), CheckpointId(3), ((b"k", b"v"), (None, b"w")), "large")
    assert PendingBuffer.decode(buffer.encode()) == buffer
    plain = PendingBuffer(TaskId("route#0"), CheckpointId(3), ((b"k", b"v"),))
    assert b'"output"' not in plain.encode() and PendingBuffer.decode(plain.encode()).output == ""


def test_an_empty_start_looks_for_the_commits_of_every_sink_side_outputs_included() -> None:
    from tidemark.runtime.supervisor.committed_output import sink_query_ids

    job = JobSpec("j", (Stage("parse", ("in",), lambda v: v["account"], Route, "parsed",
                              side_outputs={"bad": "unparsable", "extra": "extra"}),
                        _stage(inputs=("parsed",)), Stage("more", ("extra",), lambda v: v["account"], Route, "more")))
    # the side output "extra" is a channel to the stage "more": not a sink
    assert sink_query_ids(job) == ["j/route", "j/more", "j/parse/bad", "j/route/audit", "j/route/large"]


def test_a_stage_reading_a_side_output_and_an_input_topic_reads_only_the_topic_through_an_exchange() -> None:
    review = Stage("review", ("large-payments", "disputes"), lambda v: v["account"], Route, "reviewed")
    spec = JobSpec("j", (_stage(), review))
    workers = reader_workers(spec, workers_per_stage(spec, 1), {"payments": 2, "disputes": 2}, 1)
    running = physical_job(spec, workers, lambda s: f"x.exchange.{s}")
    reader = running.stage("review" + READER_SUFFIX)
    assert reader.topics == ("disputes",) and reader.forwards_to == "review"
    assert running.stage("review").topics == ("x.exchange.review", "large-payments")
    assert running.upstreams_of(running.stage("review")) == (reader, running.stage("route"))


def test_the_graph_examples_ip_counter_feeds_its_side_output_to_a_stage_that_keeps_each_ip_once() -> None:
    from tidemark.examples.access_log_graph import IP_SEEN, hit_graph

    job = hit_graph()
    assert job.is_channel_topic(job.stage("ip_hits").side_output_topics["ip_seen"])
    assert job.upstreams_of(job.stage("ip_firsts")) == (job.stage("ip_hits"),)
    records = [{"url": "/a", "ip": ip} for ip in ("1", "2", "1", "3", "2")]
    with KeyedProcessFunctionHarness.for_stage(job, "ip_hits", parallelism=2) as counts:
        counts.process_all(records)
        seen = counts.side_output(IP_SEEN)
        assert sorted(r.decoded()["ip"] for r in seen) == ["1", "1", "2", "2", "3"] and len(counts.output) == 5
    with KeyedProcessFunctionHarness.for_stage(job, "ip_firsts", parallelism=2) as firsts:
        for record in seen:
            firsts.process_record(record.key, record.value)
        assert sorted(v["ip"] for v in firsts.output_values()) == ["1", "2", "3"]
