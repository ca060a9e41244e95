"""Timers through the job API, on the runtime's own tasks (the harness): ``ctx.timer_service()`` in
``process`` and ``on_timer``, event time moved by the watermark, processing time by the clock,
timers deduplicated, deleted, snapshotted with the state and restored at another parallelism; and
the access-log examples built on them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidemark.examples import access_log
from tidemark.examples.generator import expected_top_urls, generate
from tidemark.api import NO_WATERMARK, KeyedProcessFunction
from tidemark.state import MapStateDescriptor, ValueStateDescriptor
from tidemark.testing.harness import KeyedProcessFunctionHarness

BACKENDS = ("heap", "rocksdb")
MINUTES = MapStateDescriptor("hits_per_minute")


class Remind(KeyedProcessFunction):
    """Registers an event-time timer at ``value["at"]`` (twice: one timer) and a processing-time
    one at ``value["wall"]``; ``on_timer`` says what it saw and may register a follow-up."""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(ValueStateDescriptor("seen", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        timers = ctx.timer_service()
        self.seen.update(self.seen.value() + 1)
        if "at" in value:
            timers.register_event_time_timer(value["at"])
            timers.register_event_time_timer(value["at"])
        if "wall" in value:
            timers.register_processing_time_timer(value["wall"])
        if "cancel" in value:
            timers.delete_event_time_timer(value["cancel"])

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        timers = ctx.timer_service()
        ctx.emit(ctx.key, {"key": ctx.key, "at": timestamp_ms, "domain": ctx.time_domain, "seen": self.seen.value(),
                           "watermark": timers.current_watermark(), "now": timers.current_processing_time()})
        if timestamp_ms == 100 and ctx.time_domain == "event-time":
            timers.register_event_time_timer(150)  # due already under the same watermark: fires in this round


def _fired(emitted: list[Any]) -> list[tuple[str, int, str]]:
    return [(v["key"], v["at"], v["domain"]) for v in (e.decoded() for e in emitted)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_event_time_timers_fire_in_time_order_once_with_their_key_and_state(backend: str) -> None:
    harness = KeyedProcessFunctionHarness.for_function(Remind, lambda v: v["k"], parallelism=2, state_backend=backend)
    with harness:
        for key, at in (("a", 300), ("b", 100), ("a", 200), ("c", 250)):
            harness.process({"k": key, "at": at})
        harness.process({"k": "c", "cancel": 250})
        assert harness.timers("a") == [200, 300] and harness.timers("c") == []
        assert harness.advance_watermark(99) == []
        fired = harness.advance_watermark(220)
        assert sorted(_fired(fired), key=lambda f: f[1]) == [("b", 100, "event-time"), ("b", 150, "event-time"),
                                                            ("a", 200, "event-time")]
        assert all(e.decoded()["watermark"] == 220 and e.timestamp_ms == e.decoded()["at"] for e in fired)
        assert {e.decoded()["key"]: e.decoded()["seen"] for e in fired} == {"a": 2, "b": 1}
        assert harness.advance_watermark(200) == []  # the watermark never goes back
        assert _fired(harness.advance_watermark(10**6)) == [("a", 300, "event-time")]
        assert harness.timers("a") == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_processing_time_timers_fire_when_the_clock_passes_them_without_input(backend: str) -> None:
    harness = KeyedProcessFunctionHarness.for_function(Remind, lambda v: v["k"], state_backend=backend)
    with harness:
        harness.process({"k": "a", "wall": 1_000})
        harness.process({"k": "b", "wall": 500})
        assert harness.advance_processing_time(499) == []
        assert _fired(harness.advance_processing_time(1)) == [("b", 500, "processing-time")]
        fired = harness.advance_processing_time(10_000)
        assert _fired(fired) == [("a", 1_000, "processing-time")]
        assert fired[0].decoded()["now"] == 10_500 and fired[0].decoded()["watermark"] == NO_WATERMARK


@pytest.mark.parametrize("backend", BACKENDS)
def test_timers_are_in_the_snapshot_and_move_with_their_keys_on_rescale(backend: str) -> None:
    keys = [f"k{i}" for i in range(40)]
    with KeyedProcessFunctionHarness.for_function(Remind, lambda v: v["k"], parallelism=2,
                                                  state_backend=backend) as before:
        for i, key in enumerate(keys):
            before.process({"k": key, "at": 1_000 + i, "wall": 5_000 + i})
        before.advance_watermark(1_009)  # k0..k9 fired before the snapshot
        snapshot = before.snapshot()
    other = "rocksdb" if backend == "heap" else "heap"
    for parallelism, into in ((3, backend), (1, other)):
        after = KeyedProcessFunctionHarness.for_function(Remind, lambda v: v["k"], parallelism=parallelism,
                                                         state_backend=into)
        with after.restore(snapshot):
            assert after.timers("k3") == [] and after.timers("k25") == [1_025]
            assert after.timers("k25", "processing-time") == [5_025]
            fired = _fired(after.advance_watermark(10**6))
            assert sorted(fired) == sorted((key, 1_000 + i, "event-time") for i, key in enumerate(keys) if i >= 10)
            assert len(_fired(after.advance_processing_time(10**6))) == len(keys)


def test_timers_cannot_be_used_in_open() -> None:
    class Early(KeyedProcessFunction):
        def open(self, ctx: Any) -> None:
            ctx.timer_service()

        def process(self, value: Any, ctx: Any) -> None:
            pass

    with pytest.raises(RuntimeError, match="not in open"):
        KeyedProcessFunctionHarness.for_function(Early, lambda v: v).open()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_windowed_example_emits_each_closed_minute_once_with_its_final_top(backend: str) -> None:
    job = access_log.top_urls(state_backend=backend)
    records = list(generate(2_600, seed=5))
    with KeyedProcessFunctionHarness.for_stage(job, "minute_counts") as counts, \
            KeyedProcessFunctionHarness.for_stage(job, "top_urls") as tops:
        for raw in records:
            value = json.loads(raw)
            for emitted in counts.process(value, timestamp_ms=value["ts"]):
                tops.process(emitted.decoded(), timestamp_ms=emitted.timestamp_ms)
        watermark = max(json.loads(r)["ts"] for r in records) - access_log.OUT_OF_ORDERNESS_MS - 1
        counts.advance_watermark(watermark)
        closed = tops.advance_watermark(watermark)
        assert {v["minute"]: v["top"] for v in (e.decoded() for e in closed)} == expected_top_urls(records)
        assert len(closed) == 2
        assert tops.advance_watermark(watermark + 1) == []
        first_url = json.loads(records[0])["url"]  # the first stage dropped the closed minutes' counts
        assert all(timer > watermark for timer in counts.timers(first_url))
        assert all(access_log.window_end(minute) > watermark for minute, _ in counts.state(MINUTES, first_url).items())


def test_the_inactivity_example_closes_a_session_after_the_timeout_without_input() -> None:
    job = access_log.ip_sessions(timeout_ms=5_000)
    with KeyedProcessFunctionHarness.for_stage(job, "ip_sessions") as sessions:
        sessions.process({"ip": "10.0.0.1"}, timestamp_ms=1)
        sessions.advance_processing_time(3_000)
        sessions.process({"ip": "10.0.0.1"}, timestamp_ms=2)  # moves the deadline
        sessions.process({"ip": "10.0.0.2"}, timestamp_ms=3)
        assert sessions.advance_processing_time(4_000) == []  # 7 s: 10.0.0.1 was seen at 3 s
        closed = sorted((e.decoded() for e in sessions.advance_processing_time(1_000)), key=lambda v: v["ip"])
        assert closed == [{"ip": "10.0.0.1", "requests": 2, "first_ts": 1, "last_ts": 2},
                          {"ip": "10.0.0.2", "requests": 1, "first_ts": 3, "last_ts": 3}]
        assert sessions.timers("10.0.0.1", "processing-time") == []


def test_the_testing_guide_window_example_holds() -> None:
    """docs/guide/testing.md, "Time and timers"."""
    job = access_log.top_urls()
    with KeyedProcessFunctionHarness.for_stage(job, "top_urls") as window:
        window.process({"minute": 0, "url": "/a", "hits": 3}, timestamp_ms=10)
        assert window.timers(0) == [59_999]
        assert window.advance_watermark(59_998) == []
        (closed,) = window.advance_watermark(59_999)
        assert closed.decoded() == {"minute": 0, "top": [["/a", 3]]}
