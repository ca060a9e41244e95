"""A keyed stage's co-partitioned input (``Input(co_partitioned=True)``): when its partitions
divide among the stage's workers by key group, each worker reads the partitions of its own key
groups directly, with no exchange reader; otherwise it is read through the exchange as before;
a record found in another key group's partition is dead-lettered, never silently skipped."""

from __future__ import annotations

import dataclasses
import json

import pytest

from record_paths import record_path
from tidemark.api import Input, KeyedProcessFunction, Stage, key_partition
from tidemark.examples.access_log import url_counts
from tidemark.keygroups import assign_to_key_group
from tidemark.runtime.job.ownership import co_partitioned_reads
from tidemark.runtime.job.physical_plan import READER_SUFFIX, physical_job, reader_workers, workers_per_stage
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.routing import KeyPartitioner
from tidemark.types import Epoch, TaskId

pytestmark = pytest.mark.unit


def test_the_partitions_divide_when_no_partition_holds_two_workers_key_groups() -> None:
    assert co_partitioned_reads(4, 4, 2, 128) == [[0, 1], [2, 3]]
    assert co_partitioned_reads(4, 4, 4, 128) == [[0], [1], [2], [3]]
    assert co_partitioned_reads(4, 4, 3, 128) == [[0, 1], [2], [3]]  # workers own 2, 1, 1 tasks
    assert co_partitioned_reads(8, 4, 2, 128) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert co_partitioned_reads(4, 8, 2, 128) == [[0, 1], [2, 3]]
    assert co_partitioned_reads(3, 4, 2, 128) is None  # partition 1 holds key groups of both workers
    assert co_partitioned_reads(2, 4, 4, 128) is None  # two workers in one partition
    assert co_partitioned_reads(256, 4, 2, 128) is None  # partitions without a key group: nobody would read them
    assert co_partitioned_reads(0, 4, 2, 128) is None


def test_a_producer_partitions_as_the_stages_channels_do() -> None:
    channel = KeyPartitioner(128, 6)
    for url in ("/a", "/b", "/index.html", "x" * 300):
        assert key_partition(url, 6) == channel.of_key(url)
    assert key_partition(7, 4, max_parallelism=1024) == KeyPartitioner(1024, 4).of_key(7)


@pytest.mark.parametrize("partitions, direct", [(4, True), (8, True), (3, False)])
def test_a_co_partitioned_source_stage_runs_without_a_reader_when_its_partitions_divide(partitions: int,
                                                                                         direct: bool) -> None:
    spec = url_counts(input_topic="in", co_partitioned=True, workers=2, parallelism=4)
    workers = reader_workers(spec, workers_per_stage(spec, 4), {"in": partitions}, 4)
    running = physical_job(spec, workers, lambda s: f"x.exchange.{s}")
    names = [s.name for s in running.stages]
    if direct:
        assert names == ["count_hits"] and running.stages[0].exchange is None
        assert running.stages[0].topics == ("in",) and running.stages[0].workers == 2
    else:  # read through the exchange, as an input not declared co-partitioned
        assert names == ["count_hits" + READER_SUFFIX, "count_hits"] and running.stages[1].exchange == "x.exchange.count_hits"
    plain = url_counts(input_topic="in", workers=2, parallelism=4)
    assert "count_hits" + READER_SUFFIX in reader_workers(plain, workers_per_stage(plain, 4), {"in": 4}, 4)


class _Count(KeyedProcessFunction):
    def process(self, value, ctx) -> None:
        ctx.emit(ctx.key, value)


def _record(key: str, partition: int) -> InputRecord:
    return InputRecord("in", partition, 0, 0, None, json.dumps({"k": key}).encode(), Epoch(1), TaskId("up#0"))


def _keys(owned_range: range, other_range: range) -> tuple[str, str]:
    """A key of the worker's key groups and one of the other worker's."""
    mine = next(k for k in (f"k{i}" for i in range(1000)) if assign_to_key_group(k, 128) in owned_range)
    theirs = next(k for k in (f"k{i}" for i in range(1000)) if assign_to_key_group(k, 128) in other_range)
    return mine, theirs


def test_a_record_outside_the_workers_key_groups_is_dead_lettered_when_read_directly(tmp_path) -> None:
    stage = Stage("s", (Input("in", co_partitioned=True),), lambda v: v["k"], _Count, "out")
    path, tasks, failures = record_path(stage, tmp_path, owned=0)  # key groups 0-63: partitions 0 and 1 of 4
    mine, theirs = _keys(range(0, 64), range(64, 128))
    path.process(_record(mine, key_partition(mine, 4)))
    path.process(_record(theirs, 1))  # written into this worker's partition 1, but of key group >= 64
    assert [json.loads(v) for t in tasks for _, v, _ in t.take_output()] == [{"k": mine}]
    ((record, error),) = failures.failed
    assert (record.partition, type(error).__name__, error.reason) == (1, "NotCoPartitioned", "not-co-partitioned")
    assert f"key '{theirs}' (key group {assign_to_key_group(theirs, 128)})" in str(error)


def test_through_the_exchange_another_workers_key_group_is_its_own_to_take(tmp_path) -> None:
    stage = dataclasses.replace(Stage("s", (Input("in", co_partitioned=True),), lambda v: v["k"], _Count, "out"),
                                exchange="x.exchange.s", exchanged=("in",))
    path, tasks, failures = record_path(stage, tmp_path, owned=0)
    _, theirs = _keys(range(0, 64), range(64, 128))
    path.process(_record(theirs, 1))  # a border partition both workers read: the other keeps it
    assert failures.failed == [] and [v for t in tasks for v in t.take_output()] == []
