"""The window operator's semantics (issue #34), proven with the test harness on the runtime's own
tasks and real state backends: tumbling, sliding and session windows (fixed and per-record gaps)
in event time and processing time, global windows with a count trigger; reduce, aggregate,
process and aggregate-then-process; the triggers (count, continuous, purging); allowed lateness
(late firings that update the result, too-late records set aside); merging sessions (state and
timers); cleanup at the window's end plus the lateness (state stays flat over many windows); and a
window open at a savepoint firing once, right, after a restore at another parallelism, on every
backend."""

from __future__ import annotations

import pytest

from tidemark.api import Stage
from tidemark.operators.window import WindowOperator
from tidemark.state import ListStateDescriptor, ValueStateDescriptor
from tidemark.state.timers import TimeDomain
from tidemark.testing import KeyedProcessFunctionHarness
from tidemark.windows import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    GlobalWindows,
    ProcessWindowFunction,
    PurgingTrigger,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
    TimeWindow,
    Windowed,
)

MINUTE = 60_000
BACKENDS = ["heap", "rocksdb"]


class Count:
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


class SessionStats:
    """Per session: how many requests and which URLs."""

    def create_accumulator(self):
        return {"requests": 0, "urls": []}

    def add(self, value, accumulator):
        urls = accumulator["urls"] if value["url"] in accumulator["urls"] else sorted([*accumulator["urls"], value["url"]])
        return {"requests": accumulator["requests"] + 1, "urls": urls}

    def get_result(self, accumulator):
        return {"requests": accumulator["requests"], "distinct_urls": len(accumulator["urls"])}

    def merge(self, a, b):
        return {"requests": a["requests"] + b["requests"], "urls": sorted(set(a["urls"]) | set(b["urls"]))}


class WithWindow(ProcessWindowFunction):
    """Emits the window's bounds with its one result (or its records)."""

    def process(self, key, elements, ctx):
        value = elements[0] if len(elements) == 1 else elements
        ctx.emit(key, {"key": key, "start": ctx.window.start, "end": ctx.window.end, "value": value})


def harness(windowed: Windowed, **options) -> KeyedProcessFunctionHarness:
    return KeyedProcessFunctionHarness(Stage("windows", ("in",), lambda r: r["k"], windowed, "out"), **options)


def rec(key, **fields):
    return {"k": key, **fields}


def feed(h: KeyedProcessFunctionHarness, records: list[tuple[str, int]], **fields) -> None:
    for key, ts in records:
        h.process(rec(key, ts=ts, **fields), timestamp_ms=ts)


def no_keys(h: KeyedProcessFunctionHarness, *states: str) -> bool:
    """True when no key holds any of ``states`` in any window (their state was cleaned up)."""
    return not [k for t in h.tasks for name in states for k in t.backend.keys(name)]


def pending(h: KeyedProcessFunctionHarness, domain: TimeDomain = TimeDomain.EVENT_TIME) -> int:
    """The timers of every key and window of the harness's tasks."""
    return sum(t.pending_timers(domain) for t in h.tasks)


def results(emitted) -> list:
    return sorted((e.decoded() for e in emitted), key=lambda r: (r["start"], r["key"]))


# ---------------------------------------------------------------------- tumbling and sliding

@pytest.mark.parametrize("backend", BACKENDS)
def test_tumbling_event_time_windows_fire_when_the_watermark_passes_their_end(backend) -> None:
    with harness(Windowed(TumblingWindows(MINUTE), aggregate=Count(), process=WithWindow),
                 state_backend=backend, parallelism=2) as h:
        feed(h, [("a", 1_000), ("b", 2_000), ("a", 59_999), ("a", 60_000), ("b", 119_000)])
        assert h.advance_watermark(59_998) == []
        assert results(h.advance_watermark(59_999)) == [
            {"key": "a", "start": 0, "end": MINUTE, "value": 2}, {"key": "b", "start": 0, "end": MINUTE, "value": 1}]
        fired = h.advance_watermark(200_000)
        assert results(fired) == [{"key": "a", "start": MINUTE, "end": 2 * MINUTE, "value": 1},
                                  {"key": "b", "start": MINUTE, "end": 2 * MINUTE, "value": 1}]
        assert {e.timestamp_ms for e in fired} == {2 * MINUTE - 1}  # a window's records: its last millisecond
        assert pending(h) == 0 and no_keys(h, "_window.contents")


def test_reduce_without_a_process_function_emits_the_result_with_its_key() -> None:
    with harness(Windowed(TumblingWindows(10), reduce=lambda a, b: {"k": a["k"], "n": a["n"] + b["n"]})) as h:
        for n, ts in ((1, 0), (2, 5), (4, 9), (8, 10)):
            h.process(rec("a", n=n), timestamp_ms=ts)
        assert [(e.key, e.decoded()) for e in h.advance_watermark(20)] == [
            (b"a", {"k": "a", "n": 7}), (b"a", {"k": "a", "n": 8})]


def test_a_process_function_alone_gets_every_record_of_the_window() -> None:
    with harness(Windowed(TumblingWindows(10), process=WithWindow)) as h:
        feed(h, [("a", 1), ("a", 3)])
        [fired] = h.advance_watermark(9)
        assert fired.decoded()["value"] == [rec("a", ts=1), rec("a", ts=3)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sliding_windows_put_a_record_in_size_over_slide_windows(backend) -> None:
    with harness(Windowed(SlidingWindows(5 * MINUTE, MINUTE), aggregate=Count(), process=WithWindow),
                 state_backend=backend) as h:
        feed(h, [("a", 30_000), ("a", 90_000), ("a", 150_000)])  # minutes 0, 1 and 2
        out = results(h.advance_watermark(10 * MINUTE))
    counts = {(r["start"] // MINUTE, r["end"] // MINUTE): r["value"] for r in out}
    assert counts == {(-4, 1): 1, (-3, 2): 2, (-2, 3): 3, (-1, 4): 3, (0, 5): 3, (1, 6): 2, (2, 7): 1}


def test_window_starts_are_aligned_to_the_offset_and_hold_for_negative_timestamps() -> None:
    assert TumblingWindows(10, 3).assign_windows(None, 2) == [(-7, 3)]
    assert TumblingWindows(10).assign_windows(None, -1) == [(-10, 0)]
    assert SlidingWindows(10, 5).assign_windows(None, -1) == [(-5, 5), (-10, 0)]
    uneven = SlidingWindows(10, 4)  # a size that is no multiple of the slide: records of one slide differ
    assert uneven.assign_windows(None, 8) == [(8, 18), (4, 14), (0, 10)]
    assert uneven.assign_windows(None, 11) == [(8, 18), (4, 14)]
    tumbling = TumblingWindows(10)
    assert tumbling.assign_windows(None, 3) is tumbling.assign_windows(None, 9)  # one window's records share it


# ---------------------------------------------------------------------- sessions

@pytest.mark.parametrize("backend", BACKENDS)
def test_sessions_merge_when_a_record_bridges_them_state_and_timers_included(backend) -> None:
    gap = 30 * MINUTE
    with harness(Windowed(SessionWindows(gap_ms=gap), aggregate=SessionStats(), process=WithWindow),
                 state_backend=backend) as h:
        first, second, merged = TimeWindow(0, gap), TimeWindow(40 * MINUTE, 70 * MINUTE), TimeWindow(0, 70 * MINUTE)
        h.process(rec("ip1", url="/a"), timestamp_ms=0)
        h.process(rec("ip1", url="/b"), timestamp_ms=40 * MINUTE)  # a second session
        assert (h.timers("ip1", namespace=first), h.timers("ip1", namespace=second)) == ([gap - 1], [70 * MINUTE - 1])
        h.process(rec("ip1", url="/a"), timestamp_ms=20 * MINUTE)  # bridges both: one session
        assert h.timers("ip1", namespace=first) == h.timers("ip1", namespace=second) == []  # theirs went
        assert h.timers("ip1", namespace=merged) == [70 * MINUTE - 1]
        h.process(rec("ip2", url="/c"), timestamp_ms=5 * MINUTE)
        assert [r.decoded() for r in h.advance_watermark(69 * MINUTE)] == [  # ip2's session fired, ip1's not
            {"key": "ip2", "start": 5 * MINUTE, "end": 35 * MINUTE, "value": {"requests": 1, "distinct_urls": 1}}]
        assert [r.decoded() for r in h.advance_watermark(70 * MINUTE)] == [
            {"key": "ip1", "start": 0, "end": 70 * MINUTE, "value": {"requests": 3, "distinct_urls": 2}}]
        assert h.timers("ip1", namespace=merged) == [] and no_keys(h, "_window.contents", "_window.merging-set")


def test_a_record_inside_a_session_extends_it_and_a_gap_function_gives_each_record_its_gap() -> None:
    windowed = Windowed(SessionWindows(gap=lambda r: r["gap"]), aggregate=Count(), process=WithWindow)
    with harness(windowed) as h:
        h.process(rec("u", gap=100), timestamp_ms=0)  # [0, 100)
        h.process(rec("u", gap=10), timestamp_ms=50)  # inside: [0, 100)
        h.process(rec("u", gap=500), timestamp_ms=90)  # [90, 590) touches it: [0, 590)
        h.process(rec("u", gap=5), timestamp_ms=700)  # its own [700, 705)
        out = results(h.advance_watermark(1_000))
    assert [(r["start"], r["end"], r["value"]) for r in out] == [(0, 590, 3), (700, 705, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_session_merging_three_into_one_after_a_checkpoint_restores_right(backend) -> None:
    windowed = Windowed(SessionWindows(gap_ms=10), aggregate=Count(), process=WithWindow)
    with harness(windowed, state_backend=backend) as h:
        feed(h, [("k", 0), ("k", 20), ("k", 40)])  # three sessions
        snapshot = h.snapshot(savepoint=False)
    with harness(windowed, state_backend=backend).restore(snapshot) as h:
        feed(h, [("k", 10), ("k", 30)])  # bridges all three (windows that touch merge)
        out = results(h.advance_watermark(100))
    assert [(r["start"], r["end"], r["value"]) for r in out] == [(0, 50, 5)]


# ---------------------------------------------------------------------- lateness

def test_late_records_within_the_allowed_lateness_fire_again_and_later_ones_are_too_late() -> None:
    windowed = Windowed(TumblingWindows(MINUTE), aggregate=Count(), process=WithWindow,
                        allowed_lateness_ms=2 * MINUTE)
    with harness(windowed) as h:
        feed(h, [("a", 1_000), ("a", 2_000)])
        assert [r.decoded()["value"] for r in h.advance_watermark(MINUTE)] == [2]
        late = h.process(rec("a", ts=3_000), timestamp_ms=3_000)  # behind the watermark, within lateness
        assert [r.decoded()["value"] for r in late] == [3]  # an updated result at once
        assert h.too_late == []
        h.advance_watermark(3 * MINUTE - 1)  # the window's end plus the lateness: its state goes
        assert pending(h) == 0
        assert h.process(rec("a", ts=4_000), timestamp_ms=4_000) == []
        assert h.too_late == [rec("a", ts=4_000)]
        h.process(rec("a", ts=3 * MINUTE), timestamp_ms=3 * MINUTE)  # a new window is not late
        assert h.too_late == [rec("a", ts=4_000)]


def test_without_lateness_a_record_behind_the_watermark_is_too_late() -> None:
    with harness(Windowed(TumblingWindows(10), aggregate=Count())) as h:
        h.advance_watermark(15)
        h.process(rec("a"), timestamp_ms=9)
        h.process(rec("a"), timestamp_ms=12)  # its window [10, 20) is still open
        assert h.too_late == [rec("a")]
        assert [e.decoded() for e in h.advance_watermark(19)] == [1]


# ---------------------------------------------------------------------- processing time

def test_processing_time_windows_fire_on_the_clock_without_input() -> None:
    windowed = Windowed(TumblingWindows(1_000, processing_time=True), aggregate=Count(), process=WithWindow)
    with harness(windowed) as h:
        h.clock.set(500)
        h.process(rec("a"), timestamp_ms=0)  # the record's event time plays no part
        h.process(rec("a"), timestamp_ms=10**9)
        assert h.advance_processing_time(498) == []
        assert [r.decoded()["value"] for r in h.advance_processing_time(1)] == [2]
        assert pending(h, TimeDomain.PROCESSING_TIME) == 0


def test_processing_time_sessions_close_after_the_gap_of_wall_clock() -> None:
    windowed = Windowed(SessionWindows(gap_ms=100, processing_time=True), aggregate=Count(), process=WithWindow)
    with harness(windowed) as h:
        h.process(rec("a"))
        h.advance_processing_time(60)
        h.process(rec("a"))  # extends the session to 160
        assert h.advance_processing_time(98) == []
        assert [(r.decoded()["start"], r.decoded()["end"], r.decoded()["value"])
                for r in h.advance_processing_time(1)] == [(0, 160, 2)]


# ---------------------------------------------------------------------- triggers

def test_global_windows_with_a_purging_count_trigger_fire_every_n_records() -> None:
    windowed = Windowed(GlobalWindows(), aggregate=Count(), trigger=PurgingTrigger(CountTrigger(3)))
    with harness(windowed) as h:
        fired = [e for i in range(7) for e in h.process(rec("a"), timestamp_ms=100 + i)]
    assert [e.decoded() for e in fired] == [3, 3]
    assert [e.timestamp_ms for e in fired] == [102, 105]  # a global window's output: the firing record's time


def test_a_continuous_event_time_trigger_on_global_windows_leaves_no_timer_at_the_end_of_time() -> None:
    windowed = Windowed(GlobalWindows(), aggregate=Count(), trigger=ContinuousEventTimeTrigger(100))
    with harness(windowed) as h:
        h.process(rec("a"), timestamp_ms=5)
        assert pending(h) == 1  # the next early firing only
        fired = h.advance_watermark(100)
        assert [(e.decoded(), e.timestamp_ms) for e in fired] == [(1, 100)]
        assert pending(h) == 1  # and the one after it


class Failing(ProcessWindowFunction):
    def process(self, key, elements, ctx):
        raise RuntimeError("a bug in the window function")


def test_a_firing_that_raises_emits_nothing_reports_the_timer_and_still_cleans_the_window_up() -> None:
    failed = []
    stage = Stage("windows", ("in",), lambda r: r["k"], Windowed(SessionWindows(gap_ms=10), process=Failing), "out")
    with KeyedProcessFunctionHarness(stage, operator=lambda s, _: WindowOperator(
            s, lambda timer, error: failed.append((timer.timestamp, str(error))))) as h:
        feed(h, [("a", 1), ("b", 50)])
        assert h.advance_watermark(100) == []
        assert failed == [(10, "a bug in the window function"), (59, "a bug in the window function")]
        assert pending(h) == 0 and no_keys(h, "_window.contents", "_window.merging-set")


def test_the_window_operator_s_state_names_are_refused_to_a_window_function() -> None:
    class Sneaky(ProcessWindowFunction):
        def process(self, key, elements, ctx):
            ctx.global_state(ValueStateDescriptor("_window.contents"))

    with harness(Windowed(TumblingWindows(10), aggregate=Count(), process=Sneaky)) as h:
        feed(h, [("a", 1)])
        with pytest.raises(ValueError, match="state names starting with '_window.' are the window operator's"):
            h.advance_watermark(9)


def test_a_count_trigger_fires_without_purging_so_the_result_accumulates() -> None:
    with harness(Windowed(TumblingWindows(100), aggregate=Count(), trigger=CountTrigger(2))) as h:
        fired = [e.decoded() for i in range(5) for e in h.process(rec("a"), timestamp_ms=i)]
        assert fired == [2, 4]
        assert h.advance_watermark(1_000) == []  # a count trigger does not fire at the end
        assert pending(h) == 0 and no_keys(h, "_window.contents")  # yet the window's state is cleaned up


def test_a_continuous_event_time_trigger_gives_early_results_and_the_final_one() -> None:
    windowed = Windowed(TumblingWindows(MINUTE), aggregate=Count(), trigger=ContinuousEventTimeTrigger(20_000))
    with harness(windowed) as h:
        feed(h, [("a", 1_000), ("a", 5_000)])
        assert [e.decoded() for e in h.advance_watermark(19_999)] == []
        assert [e.decoded() for e in h.advance_watermark(20_000)] == [2]  # early
        feed(h, [("a", 30_000)])
        assert [e.decoded() for e in h.advance_watermark(40_000)] == [3]  # early again
        assert [e.decoded() for e in h.advance_watermark(MINUTE - 1)] == [3]  # the window's end
        assert pending(h) == 0


def test_a_continuous_processing_time_trigger_fires_every_interval() -> None:
    windowed = Windowed(GlobalWindows(), aggregate=Count(), trigger=ContinuousProcessingTimeTrigger(100))
    with harness(windowed) as h:
        h.process(rec("a"))
        assert [e.decoded() for e in h.advance_processing_time(100)] == [1]
        h.process(rec("a"))
        assert [e.decoded() for e in h.advance_processing_time(100)] == [2]


# ---------------------------------------------------------------------- per-window and global state

class Runs(ProcessWindowFunction):
    """Counts each window's firings in per-window state and every firing of the key globally."""

    firings = ValueStateDescriptor("firings", default=0)
    total = ValueStateDescriptor("total", default=0)
    cleared: list = []

    def process(self, key, elements, ctx):
        firings, total = ctx.window_state(self.firings), ctx.global_state(self.total)
        firings.update(firings.value() + 1)
        total.update(total.value() + 1)
        ctx.emit(key, [ctx.window.start, elements[0], firings.value(), total.value()])

    def clear(self, ctx):
        Runs.cleared.append(ctx.window.start)
        ctx.window_state(self.firings).clear()


def test_a_process_function_keeps_per_window_and_global_state_and_clears_the_window_s() -> None:
    Runs.cleared = []
    windowed = Windowed(TumblingWindows(10), aggregate=Count(), process=Runs, allowed_lateness_ms=10)
    with harness(windowed) as h:
        feed(h, [("a", 1)])
        assert [e.decoded() for e in h.advance_watermark(9)] == [[0, 1, 1, 1]]
        assert [e.decoded() for e in h.process(rec("a"), timestamp_ms=2)] == [[0, 2, 2, 2]]  # late firing
        feed(h, [("a", 11)])
        assert [e.decoded() for e in h.advance_watermark(19)] == [[10, 1, 1, 3]]  # and [0, 10) cleaned up
        assert Runs.cleared == [0]
        h.advance_watermark(29)
        assert Runs.cleared == [0, 10]
        assert h.state(ValueStateDescriptor("total", default=0), "a").value() == 3


def test_per_window_state_is_refused_in_merging_windows() -> None:
    with harness(Windowed(SessionWindows(gap_ms=10), aggregate=Count(), process=Runs)) as h:
        feed(h, [("a", 1)])
        with pytest.raises(RuntimeError, match="per-window state .* merging"):
            h.advance_watermark(100)


# ---------------------------------------------------------------------- state stays flat

@pytest.mark.parametrize("backend", BACKENDS)
def test_state_does_not_grow_with_time_over_many_windows(backend) -> None:
    windowed = Windowed(SlidingWindows(1_000, 250), aggregate=Count(), allowed_lateness_ms=500)
    keys = [f"k{i}" for i in range(20)]
    with harness(windowed, state_backend=backend) as h:
        sizes = []
        for second in range(60):
            for i, key in enumerate(keys):
                h.process(rec(key), timestamp_ms=second * 1_000 + i * 40)
            h.advance_watermark(second * 1_000 + 999)
            if second % 10 == 9:
                sizes.append((sum(len(list(t.backend.keys("_window.contents"))) for t in h.tasks),
                              sum(t.pending_timers(TimeDomain.EVENT_TIME) for t in h.tasks)))
        assert len(set(sizes)) == 1, sizes  # the same number of keys and timers every 10 s
        h.advance_watermark(10**9)
        assert all(t.pending_timers(TimeDomain.EVENT_TIME) == 0 for t in h.tasks)
        assert sum(len(list(t.backend.keys("_window.contents"))) for t in h.tasks) == 0


# ---------------------------------------------------------------------- restore and rescale

@pytest.mark.parametrize("backend", ["heap", "rocksdb", "changelog"])
def test_windows_open_at_a_savepoint_fire_once_and_right_after_a_rescale_2_3_2(backend) -> None:
    from tidemark.testing.changelog import InMemoryChangelogTopic

    topic = InMemoryChangelogTopic("tidemark.test.changelog", partitions=4) if backend == "changelog" else None
    kind = "heap" if backend == "changelog" else backend
    windowed = Windowed(SessionWindows(gap_ms=100), aggregate=Count(), process=WithWindow)
    keys = [f"ip{i}" for i in range(30)]
    fired: list = []
    with harness(windowed, state_backend=kind, parallelism=2, changelog=topic) as h:
        for key in keys:
            h.process(rec(key), timestamp_ms=0)
        snapshot = h.snapshot()
    for parallelism, at in ((3, 50), (2, 120)):
        with harness(windowed, state_backend=kind, parallelism=parallelism, changelog=topic).restore(snapshot) as h:
            for key in keys:  # each record extends every open session
                h.process(rec(key), timestamp_ms=at)
            fired += h.advance_watermark(at)  # nothing due yet
            snapshot = h.snapshot()
    with harness(windowed, state_backend=kind, parallelism=3, changelog=topic).restore(snapshot) as h:
        fired += h.advance_watermark(10_000)
    assert sorted((r["key"], r["start"], r["end"], r["value"]) for r in (e.decoded() for e in fired)) == \
        sorted((key, 0, 220, 3) for key in keys)


# ---------------------------------------------------------------------- declaring windows

def test_a_windowed_stage_is_declared_with_one_clear_line_for_each_mistake() -> None:
    with pytest.raises(ValueError, match="give reduce or aggregate, not both"):
        Windowed(TumblingWindows(10), reduce=max, aggregate=Count())
    with pytest.raises(ValueError, match="give a window function"):
        Windowed(TumblingWindows(10))
    with pytest.raises(ValueError, match="GlobalWindows never end"):
        Windowed(GlobalWindows(), aggregate=Count())
    with pytest.raises(ValueError, match="cannot merge windows"):
        Windowed(SessionWindows(gap_ms=5), aggregate=Count(), trigger=_NoMerge())
    with pytest.raises(ValueError, match="allowed_lateness_ms is for event-time"):
        Windowed(TumblingWindows(10, processing_time=True), aggregate=Count(), allowed_lateness_ms=5)
    with pytest.raises(ValueError, match="slide_ms .* must not exceed size_ms"):
        SlidingWindows(10, 20)
    with pytest.raises(ValueError, match="gap_ms .* or gap"):
        SessionWindows()
    with pytest.raises(ValueError, match="windows are per key"):
        Stage("w", ("in",), None, Windowed(TumblingWindows(10), aggregate=Count()), "out")


class _NoMerge(CountTrigger):
    def __init__(self) -> None:
        super().__init__(1)

    def can_merge(self) -> bool:
        return False


def test_event_time_windows_and_triggers_need_watermarks_in_the_job() -> None:
    from tidemark.api import JobSpec

    for windowed in (Windowed(TumblingWindows(10), aggregate=Count()),
                     Windowed(GlobalWindows(), aggregate=Count(), trigger=ContinuousEventTimeTrigger(10))):
        stage = Stage("w", ("in",), lambda r: r["k"], windowed, "out")
        with pytest.raises(ValueError, match=r"event-time windows \(and event-time triggers\) go by the watermark"):
            JobSpec("job", (stage,))


def test_list_state_descriptor_of_the_contents_follows_the_window_function() -> None:
    assert isinstance(Windowed(TumblingWindows(10), process=WithWindow).contents_descriptor(), ListStateDescriptor)
