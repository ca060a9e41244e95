"""Who owns which tasks and partitions when a stage runs as several workers, and the job as it runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidemark.examples.access_log import top_urls
from tidemark.keygroups import KeyGroupRange, assign_to_key_group, compute_key_group_range
from tidemark.runtime.job.ownership import (
    channel_partition,
    channel_partitions_of,
    check_workers,
    input_partitions_of,
    subtasks_of,
    worker_of,
)
from tidemark.runtime.job.physical_plan import (
    READER_SUFFIX,
    physical_job,
    reader_workers,
    reads_with_spark,
    source_operators,
    workers_per_stage,
)
from tidemark.runtime.job.attempt import Attempt
from tidemark.runtime.worker.routing import ChannelPartitioner, KeyGroupRouter


@given(st.integers(1, 64).flatmap(lambda p: st.tuples(st.just(p), st.integers(1, p))))
def test_every_subtask_has_exactly_one_worker_and_blocks_are_contiguous(pw: tuple[int, int]) -> None:
    parallelism, workers = pw
    blocks = [subtasks_of(w, parallelism, workers) for w in range(workers)]
    assert [i for block in blocks for i in block] == list(range(parallelism))
    assert all(len(block) >= 1 for block in blocks)  # W <= P: no worker without tasks
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
    for w, block in enumerate(blocks):
        assert all(worker_of(i, parallelism, workers) == w for i in block)


@given(st.sampled_from([1, 8, 128, 4096]).flatmap(
    lambda m: st.tuples(st.just(m), st.integers(1, min(m, 32)), st.integers(1, 16))))
def test_a_workers_channel_partitions_carry_every_key_group_it_owns(args: tuple[int, int, int]) -> None:
    max_parallelism, parallelism, partitions = args
    for index in range(parallelism):
        owned = compute_key_group_range(max_parallelism, parallelism, index)
        mine = channel_partitions_of(owned, max_parallelism, partitions)
        assert {channel_partition(g, max_parallelism, partitions) for g in owned} == set(mine)
        assert all(0 <= p < partitions for p in mine)


def test_channel_partitions_are_disjoint_when_the_ranges_align() -> None:
    halves = [compute_key_group_range(128, 2, i) for i in range(2)]
    assert [channel_partitions_of(r, 128, 4) for r in halves] == [[0, 1], [2, 3]]
    assert channel_partitions_of(KeyGroupRange(5, 4), 128, 4) == []


def test_source_workers_divide_the_input_partitions() -> None:
    partitions = [("b", 0), ("a", 1), ("a", 0), ("b", 1), ("a", 2)]
    shares = [input_partitions_of(w, 2, partitions) for w in range(2)]
    assert shares == [[("a", 0), ("a", 1), ("a", 2)], [("b", 0), ("b", 1)]]
    assert sorted(tp for share in (input_partitions_of(w, 3, partitions) for w in range(3)) for tp in share) == \
        sorted(partitions)


def test_workers_outside_one_to_parallelism_are_refused() -> None:
    check_workers(2, 2)
    with pytest.raises(ValueError, match="workers must be in 1..parallelism"):
        check_workers(3, 2)
    with pytest.raises(ValueError, match="workers must be at least 1"):
        top_urls(job_id="j", workers=0)


def test_a_partial_router_says_when_a_key_is_another_workers() -> None:
    mine = [compute_key_group_range(128, 4, i) for i in (2, 3)]
    router = KeyGroupRouter(128, mine, complete=False)
    for key in map(str, range(200)):
        group = assign_to_key_group(key, 128)
        expected = next((i for i, r in enumerate(mine) if group in r), -1)
        assert router.task_index(key) == expected
    with pytest.raises(ValueError, match="do not cover"):
        KeyGroupRouter(128, mine)


def _spec(workers: int = 1):
    return top_urls(job_id="j", input_topic="in", output_topic="out", workers=workers)


def test_one_worker_per_stage_runs_the_job_as_written() -> None:
    spec = _spec()
    running = physical_job(spec, workers_per_stage(spec, 2), lambda s: f"x.{s}")
    assert [s.name for s in running.stages] == [s.name for s in spec.stages]
    assert all(s.workers == 1 for s in running.stages)


def test_a_source_stage_on_several_workers_reads_through_an_exchange() -> None:
    spec = _spec(workers=2)
    workers = reader_workers(spec, workers_per_stage(spec, 4), {"in": 1}, 4)
    running = physical_job(spec, workers, lambda s: f"x.exchange.{s}")
    first, *rest = spec.stages
    reader, keyed, *after = running.stages
    assert reader.name == first.name + READER_SUFFIX and reader.forwards_to == first.name
    assert reader.topics == first.topics and reader.output == f"x.exchange.{first.name}"
    assert reader.workers == 1  # one input partition: one reader is enough
    assert keyed.name == first.name and keyed.topics == (reader.output,) and keyed.workers == 2
    assert keyed.exchange == reader.output and keyed.exchanged == first.topics and keyed.inputs == first.inputs
    assert running.upstreams_of(keyed) == (reader,) and running.is_source(reader)
    assert [s.name for s in after] == [s.name for s in rest] and all(s.workers == 2 for s in after)
    assert source_operators(reader) == (reader.operator_id, first.operator_id)
    assert source_operators(first) == (first.operator_id, reader.operator_id)


def test_workers_are_capped_at_the_parallelism_and_a_stage_setting_wins() -> None:
    import dataclasses
    spec = _spec(workers=4)
    stages = (dataclasses.replace(spec.stages[0], workers=1), *spec.stages[1:])
    spec = dataclasses.replace(spec, stages=stages)
    assert workers_per_stage(spec, 2) == {stages[0].name: 1, stages[1].name: 2}
    assert workers_per_stage(spec, 8, default=3) == {stages[0].name: 1, stages[1].name: 3}


def test_the_channel_partitioner_keys_a_record_as_the_reading_stage_does() -> None:
    spec = _spec()
    reader = spec.stages[1]
    partitioner = ChannelPartitioner(reader, spec.stages[0].output, spec.max_parallelism, 4)
    value = b'{"minute": 5, "url": "/a", "hits": 3}'
    key = reader.key_by(reader.decode(None, value))
    assert partitioner(None, value) == channel_partition(assign_to_key_group(key, 128), 128, 4)
    with pytest.raises(Exception):
        partitioner(None, b"not json")


def test_source_positions_come_from_the_operator_that_read_those_partitions() -> None:
    from tidemark.protocol.messages import CheckpointMetadata, SourceOffset, TaskSnapshot
    from tidemark.runtime.worker.restore import source_positions
    from tidemark.types import CheckpointId, CheckpointType, JobId, KeyGroup, OperatorId, TaskId

    def task(operator: str, index: int, offsets: list[tuple[str, int, int]]) -> TaskSnapshot:
        return TaskSnapshot(TaskId(f"{operator}#{index}"), OperatorId(operator), index, KeyGroup(0), KeyGroup(127),
                            source_offsets=tuple(SourceOffset(*o) for o in offsets))

    # taken with two workers: the reader holds the input positions, the keyed stage its exchange cut
    metadata = CheckpointMetadata(JobId("j"), CheckpointId(4), CheckpointType.SAVEPOINT, 0, 0, 128, (
        task("mc.read", 0, [("in", 0, 10), ("in", 1, 11)]), task("mc.read", 1, [("in", 2, 12)]),
        task("mc", 0, [("x.exchange.mc", 0, 5)]), task("mc", 1, [("x.exchange.mc", 1, 6)])))
    reads = {("in", 0), ("in", 1), ("in", 2)}
    assert source_positions(metadata, (OperatorId("mc"), OperatorId("mc.read")), reads) == \
        {("in", 0): 10, ("in", 1): 11, ("in", 2): 12}  # one worker again: the reader's positions
    assert source_positions(metadata, (OperatorId("mc.read"), OperatorId("mc")), {("in", 2)}) == {("in", 2): 12}
    assert source_positions(metadata, (OperatorId("mc"),), {("x.exchange.mc", 1)}) == {("x.exchange.mc", 1): 6}


@pytest.mark.parametrize("old_parallelism,new_parallelism,workers", [(2, 2, 2), (3, 2, 2), (2, 4, 3), (4, 4, 1)])
def test_each_old_tasks_sink_buffers_go_to_exactly_one_new_worker(old_parallelism, new_parallelism, workers) -> None:
    from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot
    from tidemark.runtime.worker.restore import inherited_tasks
    from tidemark.types import CheckpointId, CheckpointType, JobId, KeyGroup, OperatorId, TaskId

    old = []
    for index in range(old_parallelism):
        kgr = compute_key_group_range(128, old_parallelism, index)
        old.append(TaskSnapshot(TaskId(f"op#{index}"), OperatorId("op"), index, KeyGroup(kgr.start), KeyGroup(kgr.end)))
    metadata = CheckpointMetadata(JobId("j"), CheckpointId(3), CheckpointType.CHECKPOINT, 0, 0, 128, tuple(old))
    shares = [inherited_tasks(metadata, OperatorId("op"),
                              [compute_key_group_range(128, new_parallelism, i)
                               for i in subtasks_of(w, new_parallelism, workers)]) for w in range(workers)]
    assert sorted(t for share in shares for t in share) == sorted(t.task_id for t in old)


def test_only_the_stages_that_read_the_jobs_input_read_with_spark(tmp_path) -> None:
    """A stage reading only channels (a later stage, the keyed stage behind an exchange reader)
    reads them in process and starts no SparkSession; a source stage, an exchange reader and a
    fused worker (its reader lane reads the input) read with a streaming query."""
    ref = "tidemark.examples.access_log:top_urls"
    for workers, spec in ((1, _spec()), (2, _spec(workers=2))):
        per_stage = reader_workers(spec, workers_per_stage(spec, 4), {"in": 4}, 4)
        args = {"job_id": "j", "input_topic": "in", "output_topic": "out", "workers": workers}

        def attempt(stage: str, fused: str | None = None) -> Attempt:
            return Attempt(ref, stage, 1, 4, tmp_path, args, workers=per_stage, fused=fused)

        first, second = (stage.name for stage in spec.stages)
        assert not reads_with_spark(attempt(second))
        if workers == 1:
            assert reads_with_spark(attempt(first))
        else:  # unfused: the reader reads the input, its keyed stage the exchange; fused: one process
            assert reads_with_spark(attempt(first + READER_SUFFIX))
            assert not reads_with_spark(attempt(first))
            assert reads_with_spark(attempt(first, fused=first + READER_SUFFIX))
