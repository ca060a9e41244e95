"""Live state queries on a worker (:mod:`tidemark.runtime.worker.live_state`): which task answers
and what it answers, on the runtime's own tasks and state backends (the test harness's)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tidemark.api import KeyedProcessFunction
from tidemark.examples.access_log import url_counts
from tidemark.keygroups import assign_to_key_group
from tidemark.protocol.messages import StateQuery, StateQueryOutcome
from tidemark.runtime.worker import live_state
from tidemark.runtime.worker.live_state import answer, owning_task, to_json
from tidemark.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from tidemark.testing.harness import KeyedProcessFunctionHarness
from tidemark.types import Epoch, JobId

JOB = JobId("live")


def query(state: str, key: Any, stage: str = "count_hits") -> StateQuery:
    return StateQuery(JOB, "r1", stage, state, json.dumps(key), 0)


@contextlib.contextmanager
def counts(parallelism: int = 4, **options: Any) -> Iterator[KeyedProcessFunctionHarness]:
    with KeyedProcessFunctionHarness.for_stage(url_counts(parallelism=parallelism), "count_hits",
                                               **options) as harness:
        for url in ["/a", "/b", "/a", "/c", "/a"]:
            harness.process({"url": url})
        yield harness


def answers_of(harness: KeyedProcessFunctionHarness, q: StateQuery, workers: int) -> list[Any]:
    """The answers of each worker (its tasks: a contiguous share of the stage's tasks)."""
    share = len(harness.tasks) // workers
    return [answer(q, harness.stage.name, harness.tasks[w * share:(w + 1) * share], Epoch(3)) for w in range(workers)]


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_only_the_worker_owning_the_key_group_answers_with_the_count(backend):
    with counts(state_backend=backend) as harness:
        replies = answers_of(harness, query("hits", "/a"), workers=2)
        (found,) = [r for r in replies if r is not None]
        owner = harness.task_for("/a")
        assert found.outcome is StateQueryOutcome.FOUND and json.loads(found.value_json) == 3
        assert found.task_id == owner.task_id and found.epoch == 3 and found.request_id == "r1"
        assert assign_to_key_group("/a", harness.max_parallelism) in owner.key_groups
        assert owning_task(harness.tasks, "/a") is owner


def test_a_query_of_another_stage_is_not_answered():
    with counts() as harness:
        assert answers_of(harness, query("hits", "/a", stage="top_urls"), workers=1) == [None]


def test_unknown_state_and_unknown_key_are_answered_as_such():
    with counts(parallelism=1) as harness:
        (unknown_state,) = answers_of(harness, query("visits", "/a"), workers=1)
        assert unknown_state.outcome is StateQueryOutcome.UNKNOWN_STATE and "'hits'" in unknown_state.detail
        (unknown_key,) = answers_of(harness, query("hits", "/never"), workers=1)
        assert unknown_key.outcome is StateQueryOutcome.UNKNOWN_KEY and unknown_key.value_json is None
        (int_key,) = answers_of(harness, query("hits", 7), workers=1)  # the stage's keys are strings
        assert int_key.outcome is StateQueryOutcome.UNKNOWN_KEY


def test_reading_leaves_the_current_key_and_the_counting_as_they_were():
    with counts(parallelism=1) as harness:
        backend = harness.tasks[0].backend
        before = backend.get_current_key()
        answers_of(harness, query("hits", "/b"), workers=1)
        assert backend.get_current_key() == before
        harness.process({"url": "/b"})
        assert harness.state(ValueStateDescriptor("hits", default=0), "/b").value() == 2


class Thing:
    def __repr__(self) -> str:
        return "<Thing>"


class Collect(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(ListStateDescriptor("seen"))
        self.by_kind = ctx.get_state(MapStateDescriptor("by_kind"))
        self.last = ctx.get_state(ValueStateDescriptor("last"))

    def process(self, value: Any, ctx: Any) -> None:
        self.seen.add(value["n"])
        self.by_kind.put(value["kind"], (self.by_kind.get(value["kind"]) or 0) + 1)
        self.last.update({(value["n"], value["kind"]): 1})  # a value state holds it; JSON cannot (tuple keys)


def test_list_map_and_values_json_cannot_hold():
    harness = KeyedProcessFunctionHarness.for_function(Collect, lambda v: v["user"], name="collect", parallelism=2)
    with harness:
        for n, kind in enumerate(["x", "y", "x"]):
            harness.process({"user": 41, "n": n, "kind": kind})

        def ask(state: str) -> Any:
            (reply,) = [r for r in (answer(query(state, 41, "collect"), "collect", [t], Epoch(1))
                                    for t in harness.tasks) if r is not None]
            return reply

        assert json.loads(ask("seen").value_json) == [0, 1, 2]
        assert json.loads(ask("by_kind").value_json) == {"x": 2, "y": 1}
        last = ask("last")
        assert last.value_repr and json.loads(last.value_json) == "{(2, 'x'): 1}"


def test_a_value_too_large_for_an_answer_is_answered_as_such(monkeypatch):
    with counts(parallelism=1) as harness:
        monkeypatch.setattr(live_state, "MAX_VALUE_BYTES", 0)
        (reply,) = answers_of(harness, query("hits", "/a"), workers=1)
        assert reply.outcome is StateQueryOutcome.TOO_LARGE and reply.value_json is None
        assert "1 bytes of JSON" in reply.detail and "tidemark state read" in reply.detail


def test_to_json_writes_as_the_default_encoder_and_falls_back_to_repr():
    assert to_json({"b": 1, "a": [1.5, None]}) == ('{"a":[1.5,null],"b":1}', False)
    assert to_json({1: "x"}) == ('{"1":"x"}', False)
    assert to_json(object.__new__(Thing)) == ('"<Thing>"', True)
