"""The joins (#35 point 4) on the test harness: the interval join gives what a nested loop over
both inputs gives, whatever the arrival order within the watermark's delay, across a savepoint
and a rescale, and its state stays flat over a long run (the watermark cleans it); the table join
joins each event with the row in force at its time, deletions included, and keeps only the
versions still needed."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from tidemark.api import Input, Stage
from tidemark.state.timers import TimeDomain
from tidemark.joins import IntervalJoin, TableJoin, interval_join, table_decode, table_join
from tidemark.testing import KeyedProcessFunctionHarness

pytestmark = pytest.mark.unit

LOWER, UPPER, DELAY = -2_000, 3_000, 1_500  # the bounds; how far behind the newest time the watermark trails


def _records(n: int, seed: int) -> list[tuple[int, dict[str, Any]]]:
    """(input, record) in arrival order: times rising with jitter up to DELAY, keys a few."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = i * 100 + rng.randrange(DELAY)
        out.append((rng.randrange(2), {"id": i, "k": f"k{rng.randrange(7)}", "t": t}))
    return out


def _expected(records: list[tuple[int, dict[str, Any]]]) -> Counter[tuple[int, int]]:
    firsts = [r for side, r in records if side == 0]
    seconds = [r for side, r in records if side == 1]
    return Counter((a["id"], b["id"]) for a in firsts for b in seconds
                   if a["k"] == b["k"] and a["t"] + LOWER <= b["t"] <= a["t"] + UPPER)


def _join(first: Any, second: Any) -> Any:
    return [first["id"], second["id"], max(first["t"], second["t"])]


def _stage() -> Stage:
    key = lambda r: r["k"]  # noqa: E731
    return Stage("join", (Input("a", key_by=key), Input("b", key_by=key)), None, interval_join(LOWER, UPPER, _join),
                 "joined")


def _feed(harness: KeyedProcessFunctionHarness, records: list[tuple[int, dict[str, Any]]], newest: int = 0) -> int:
    """As a worker: records at or behind the watermark are late (none here), the watermark trails."""
    for side, record in records:
        assert record["t"] > harness.time.watermark, "the generator makes no late record"
        harness.process(record, input=side, timestamp_ms=record["t"])
        newest = max(newest, record["t"])
        harness.advance_watermark(newest - DELAY - 1)
    return newest


def _pairs(harness: KeyedProcessFunctionHarness) -> Counter[tuple[int, int]]:
    values = [json.loads(e.value) for e in harness.output]
    assert all(e.timestamp_ms == v[2] for e, v in zip(harness.output, values))  # the later of the two times
    return Counter((v[0], v[1]) for v in values)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_the_interval_join_is_the_nested_loop_across_a_savepoint_and_a_rescale(backend: str) -> None:
    records = _records(3_000, seed=1)
    with KeyedProcessFunctionHarness(_stage(), parallelism=2, state_backend=backend) as first:
        newest = _feed(first, records[:1_500])
        pairs = _pairs(first)
        snapshot = first.snapshot()
    with KeyedProcessFunctionHarness(_stage(), parallelism=3, state_backend=backend).restore(snapshot) as second:
        second.advance_watermark(newest - DELAY - 1)
        _feed(second, records[1_500:], newest)
        pairs += _pairs(second)
    assert pairs == _expected(records) and len(pairs) > 1_000


def _buffered(harness: KeyedProcessFunctionHarness, keys: list[str]) -> int:
    return sum(len(v) for k in keys for d in (IntervalJoin.FIRST, IntervalJoin.SECOND)
               for _, v in harness.state(d, k).items())


def test_the_interval_join_state_stays_flat_over_a_long_run() -> None:
    keys = [f"k{n}" for n in range(7)]
    sizes = []
    with KeyedProcessFunctionHarness(_stage(), parallelism=2) as harness:
        newest = 0
        for part in range(20):
            newest = _feed(harness, [(s, dict(r, t=r["t"] + part * 1_000_000)) for s, r in _records(1_000, part)],
                           newest)
            sizes.append(_buffered(harness, keys))
            watermark = harness.time.watermark
            for key in keys:  # nothing kept that no record to come can join
                assert all(t + UPPER > watermark for t, _ in harness.state(IntervalJoin.FIRST, key).items())
                assert all(t - LOWER > watermark for t, _ in harness.state(IntervalJoin.SECOND, key).items())
        timers = sum(task.pending_timers(TimeDomain.EVENT_TIME) for task in harness.tasks)
    # 20,000 records in: a few dozen kept, the same at the end as after the first thousand
    assert 0 < max(sizes) <= 80 and sizes[-1] <= 2 * sizes[0] + 10, sizes
    assert 0 < timers <= 80, timers


def test_interval_join_bounds_are_checked() -> None:
    with pytest.raises(ValueError, match="lower_ms .* must not be above upper_ms"):
        interval_join(5, -5)


# ---------------------------------------------------------------- the table join


def _enrich(event: Any, row: Any) -> Any:
    return {"id": event["id"], "owner": None if row is None else row["owner"]}


def _table_stage(inner: bool = False) -> Stage:
    return Stage("enrich", (Input("events", key_by=lambda e: e["url"]),
                            Input("owners", decode=table_decode(), key_by=lambda row: row["key"])),
                 None, table_join(_enrich, inner=inner), "enriched")


def _row(url: str, owner: str | None) -> bytes | None:
    return None if owner is None else json.dumps({"owner": owner}).encode()


@pytest.mark.parametrize("inner", [False, True])
def test_each_event_is_joined_with_the_row_in_force_at_its_time(inner: bool) -> None:
    with KeyedProcessFunctionHarness(_table_stage(inner), parallelism=2) as harness:
        def row(t: int, url: str, owner: str | None) -> None:
            harness.process_record(url.encode(), _row(url, owner), input=1, timestamp_ms=t)

        def event(t: int, i: int, url: str = "/a") -> None:
            harness.process({"id": i, "url": url}, timestamp_ms=t)

        event(5, 1)  # before any row
        row(10, "/a", "ann")
        event(12, 2)
        event(30, 4)  # arrives before the row of 20, which is in force at 30
        row(20, "/a", "bob")
        event(15, 3)  # between 10 and 20: ann
        row(40, "/a", None)  # deleted
        event(45, 5)
        event(50, 6, "/b")  # another key, no row
        harness.advance_watermark(100)
        got = {v["id"]: v["owner"] for v in harness.output_values()}
        expected = {1: None, 2: "ann", 3: "ann", 4: "bob", 5: None, 6: None}
        assert got == ({i: o for i, o in expected.items() if o is not None} if inner else expected)
        assert [t for t, _ in harness.state(TableJoin.VERSIONS, "/a").items()] == [40]  # only the one in force
        assert all(harness.state(TableJoin.EVENTS, url).is_empty() for url in ("/a", "/b"))


def test_a_table_record_without_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match="a table record has a key"):
        table_decode()(None, b"{}")
