"""Which worker processes an attempt launches (runtime.supervisor.launch_plan): one per worker of
every stage as it runs, or, fused, an exchange reader's workers in its stage's processes; and
where each fault plan lands (a fused process's faults scoped to the lane they name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.examples.access_log import url_counts
from tidemark.examples.access_log_graph import hit_graph
from tidemark.runtime.job.attempt import Assignment
from tidemark.runtime.job.physical_plan import physical_job, reader_workers, workers_per_stage
from tidemark.runtime.supervisor.attempt_planner import FaultPlan
from tidemark.runtime.supervisor.launch_plan import plan_launches
from tidemark.types import Epoch

pytestmark = pytest.mark.unit


def _stages(spec, parallelism: int, partitions: int):
    workers = reader_workers(spec, workers_per_stage(spec, parallelism), {"in": partitions}, parallelism)
    return physical_job(spec, workers, lambda s: f"x.{s}").stages


def _launches(stages, *, fused: bool, faults: tuple[str, ...] = (), attempt: int = 0):
    return plan_launches(stages, job_ref="m:j", job_args={"a": 1}, epoch=Epoch(3), attempt=attempt, parallelism=4,
                         run_dir=Path("/run"), restore_path="chk-2/_metadata",
                         faults=tuple(FaultPlan.parse(f) for f in faults), fused=fused, port=lambda i: 9000 + i)


def _summary(launches):
    return [(launch.name, launch.assignment.attempt.stage, launch.assignment.attempt.worker,
             launch.assignment.attempt.fused, launch.assignment.fault, launch.assignment.http_port)
            for launch in launches]


def test_unfused_every_worker_of_every_stage_is_a_process_in_job_order() -> None:
    stages = _stages(url_counts(input_topic="in", workers=2), 4, 4)
    launches = _launches(stages, fused=False, faults=("0@count_hits.read@after-snapshot:2",
                                                      "0@count_hits.w1@after-ack", "1@count_hits@after-batch"))
    assert _summary(launches) == [
        ("count_hits.read.w0", "count_hits.read", 0, None, "after-snapshot:2", 9000),
        ("count_hits.read.w1", "count_hits.read", 1, None, None, 9001),
        ("count_hits.w0", "count_hits", 0, None, None, 9002),
        ("count_hits.w1", "count_hits", 1, None, "after-ack", 9003),
    ]
    attempt = launches[0].assignment.attempt
    assert (attempt.epoch, attempt.parallelism, attempt.run_dir, attempt.restore_path, attempt.job_args) == (
        3, 4, Path("/run"), "chk-2/_metadata", {"a": 1})
    assert attempt.workers == {"count_hits.read": 2, "count_hits": 2}
    assert [lane.stage for lane in attempt.lanes()] == ["count_hits.read"]


def test_fused_a_readers_workers_run_in_its_stages_processes_with_their_faults_scoped_to_their_lane() -> None:
    stages = _stages(url_counts(input_topic="in", workers=2), 4, 4)
    launches = _launches(stages, fused=True, faults=("0@count_hits.read@after-snapshot:2",
                                                     "0@count_hits.w1@after-ack", "0@count_hits.read.w1@after-batch"))
    assert _summary(launches) == [
        ("count_hits.w0", "count_hits", 0, "count_hits.read", "count_hits.read=after-snapshot:2", 9000),
        ("count_hits.w1", "count_hits", 1, "count_hits.read",
         "count_hits.read=after-batch,count_hits=after-ack", 9001),
    ]
    reader, keyed = launches[1].assignment.attempt.lanes()
    assert (reader.stage, reader.worker, reader.fused, reader.process) == ("count_hits.read", 1, None,
                                                                           "count_hits.read.w1")
    assert (keyed.stage, keyed.worker, keyed.fused, keyed.process) == ("count_hits", 1, None, "count_hits.w1")
    assert keyed.ready_file == launches[1].assignment.attempt.ready_file  # the process's files are its stage's
    line = launches[1].assignment.to_line().decode()
    assert Assignment.from_line(line) == launches[1].assignment  # a standby or an adopter gets it whole


def test_fused_a_stage_with_more_workers_than_its_reader_runs_the_others_alone() -> None:
    stages = _stages(url_counts(input_topic="in", workers=3), 4, 2)  # 2 input partitions: 2 readers
    assert _summary(_launches(stages, fused=True)) == [
        ("count_hits.w0", "count_hits", 0, "count_hits.read", None, 9000),
        ("count_hits.w1", "count_hits", 1, "count_hits.read", None, 9001),
        ("count_hits.w2", "count_hits", 2, None, None, 9002),
    ]


def test_fused_a_stage_reading_an_input_and_a_channel_on_one_worker_takes_its_reader_in() -> None:
    """``url_totals`` reads the input topic and other stages' channels: it reads the input through an
    exchange even on one worker (aligned with its channels); fused, that reader runs in its process."""
    stages = _stages(hit_graph(input_topic="in"), 2, 4)
    assert [s.name for s in stages if s.forwards_to] == ["url_totals.read"]
    fused = _summary(_launches(stages, fused=True, faults=("0@url_totals.read@after-snapshot",)))
    assert [name for name, *_ in fused] == ["parse", "url_hits", "ip_hits", "ip_firsts", "url_totals"]
    assert fused[-1][2:5] == (0, "url_totals.read", "url_totals.read=after-snapshot")
    assert [p for *_, p in fused] == [9000, 9001, 9002, 9003, 9004]  # one port per process, fewer processes
