"""A stage with every kind of keyed state, timers and operator state, run by the test harness,
whose checkpoints and savepoints the state-processor tests read."""

from __future__ import annotations

from typing import Any

from tidemark.api import CheckpointedFunction, KeyedProcessFunction
from tidemark.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from tidemark.testing import KeyedProcessFunctionHarness as Harness
from tidemark.testing.changelog import InMemoryChangelogTopic


class Average:
    def create_accumulator(self) -> list[int]:
        return [0, 0]

    def add(self, value: int, accumulator: list[int]) -> list[int]:
        return [accumulator[0] + value, accumulator[1] + 1]

    def get_result(self, accumulator: list[int]) -> float:
        return accumulator[0] / accumulator[1]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [a[0] + b[0], a[1] + b[1]]


COUNT = ValueStateDescriptor("count", default=0)
LAST_SEEN = ValueStateDescriptor("last_seen", ttl=StateTtlConfig(ttl_seconds=3600))
STATUSES = ListStateDescriptor("statuses")
BY_METHOD = MapStateDescriptor("by_method")
TOTAL_BYTES = ReducingStateDescriptor("total_bytes", lambda a, b: a + b)
AVERAGE_BYTES = AggregatingStateDescriptor("average_bytes", Average())
SEEN = ListStateDescriptor("seen")  # operator state, even-split
KEYED = [COUNT, LAST_SEEN, STATUSES, BY_METHOD, TOTAL_BYTES, AVERAGE_BYTES]
STAGE = "profile"


class Profile(KeyedProcessFunction, CheckpointedFunction):
    """Per client: every kind of keyed state, an event-time timer a minute after each request, and
    the clients each task saw in operator state."""

    def initialize_state(self, ctx: Any) -> None:
        self.seen = ctx.get_list_state(SEEN)
        self.pending: list[str] = []

    def snapshot_state(self, ctx: Any) -> None:
        self.seen.add_all(self.pending)
        self.pending = []

    def open(self, ctx: Any) -> None:
        self.count = ctx.get_state(COUNT)
        self.last_seen = ctx.get_state(LAST_SEEN)
        self.statuses = ctx.get_state(STATUSES)
        self.by_method = ctx.get_state(BY_METHOD)
        self.total = ctx.get_state(TOTAL_BYTES)
        self.average = ctx.get_state(AVERAGE_BYTES)

    def process(self, value: Any, ctx: Any) -> None:
        self.count.update(self.count.value() + 1)
        self.last_seen.update(value["ts"])
        self.statuses.add(value["status"])
        self.by_method.put(value["method"], (self.by_method.get(value["method"]) or 0) + 1)
        self.total.add(value["bytes"])
        self.average.add(value["bytes"])
        ctx.timer_service().register_event_time_timer(value["ts"] + 60_000)
        self.pending.append(ctx.key)


def request(i: int) -> dict[str, Any]:
    return {"ip": f"10.0.0.{i % 17}", "ts": 1000 * i, "method": ("GET", "POST", "PUT")[i % 3],
            "status": (200, 404, 500)[i % 4 % 3], "bytes": 10 * i}


def harness(backend: str, parallelism: int, changelog: InMemoryChangelogTopic | None = None,
            **options: Any) -> Harness:
    return Harness.for_function(Profile, lambda v: v["ip"], name=STAGE, parallelism=parallelism,
                                state_backend=backend, job_id="profiles", changelog=changelog, **options)


def keyed_state_of(h: Harness, keys: list[str]) -> dict[str, dict[str, Any]]:
    """What the harness's tasks hold for ``keys``, state by state, as stored (an aggregating state's
    accumulator: the reader reads accumulators)."""
    out: dict[str, dict[str, Any]] = {d.name: {} for d in KEYED}
    for key in keys:
        out["count"][key] = h.state(COUNT, key).value()
        out["last_seen"][key] = h.state(LAST_SEEN, key).value()
        out["statuses"][key] = h.state(STATUSES, key).get()
        out["by_method"][key] = dict(h.state(BY_METHOD, key).items())
        out["total_bytes"][key] = h.state(TOTAL_BYTES, key).get()
        state = h.state(AVERAGE_BYTES, key)
        out["average_bytes"][key] = state._table.get(state._ns)  # the stored accumulator
    return out
