"""The attempt a warm standby takes over travels as one JSON line; its fault arms the injector."""

from pathlib import Path

import pytest

from tidemark.runtime.job.faults import FaultInjector
from tidemark.runtime.job.attempt import Assignment, Attempt
from tidemark.types import Epoch


def test_an_assignment_survives_its_line_whole():
    attempt = Attempt("tidemark.examples.access_log:top_urls", "top_urls", Epoch(7), 3, Path("/tmp/run dir"),
                      {"input": "access-log", "n": 2}, "job/chk-4/_metadata")
    assignment = Assignment(attempt, "after-ack:2", 9401)
    line = assignment.to_line()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert Assignment.from_line(line.decode()) == assignment


def test_an_assignment_without_restore_fault_or_port():
    assignment = Assignment(Attempt("m:j", "s", Epoch(1), 1, Path("r")))
    assert Assignment.from_line(assignment.to_line().decode()) == assignment


def test_configure_arms_and_disarms_the_injector():
    faults = FaultInjector(None)
    assert not faults.armed("after-ack")
    faults.configure("after-ack:3")
    assert faults.armed("after-ack") and faults.remaining == 3
    faults.configure(None)
    assert not faults.armed("after-ack")
    with pytest.raises(ValueError, match="unknown point"):
        faults.configure("nowhere")


def test_a_fault_of_a_lane_counts_only_that_lanes_hits_and_several_arm_one_process(monkeypatch):
    """A process running two stage workers (lanes) dies at the point of the lane a spec names;
    a spec without a lane counts every thread's hits."""
    import threading

    from tidemark.runtime.job import faults as faults_module

    kills: list[str | None] = []
    monkeypatch.setattr(faults_module.os, "kill", lambda pid, sig: kills.append(faults_module.current_lane()))
    faults = FaultInjector("s.read=after-snapshot:2,s=during-alignment")
    assert faults.point == "after-snapshot" and faults.remaining == 2
    assert not faults.armed("after-snapshot")  # this thread is in no lane

    def run(lane: str, point: str, times: int) -> None:
        faults_module.enter_lane(lane)
        for _ in range(times):
            faults.hit(point)

    for lane, point in (("s", "after-snapshot"), ("s.read", "after-snapshot"), ("s.read", "during-alignment")):
        thread = threading.Thread(target=run, args=(lane, point, 1))
        thread.start()
        thread.join()
    assert kills == []  # the keyed lane's snapshot, the reader's first one, a point not armed for the reader
    with faults_module.lane("s.read"):
        assert faults.armed("after-snapshot") and not faults.armed("during-alignment")
        faults.hit("after-snapshot")
    assert kills == ["s.read"] and faults_module.current_lane() is None
    with faults_module.lane("s"):
        faults.hit("during-alignment")
    assert kills == ["s.read", "s"]
    anywhere = FaultInjector("after-ack")
    with faults_module.lane("x"):
        anywhere.hit("after-ack")
    assert kills == ["s.read", "s", "x"]
    with pytest.raises(ValueError, match="unknown point"):
        FaultInjector("s=nowhere")


def test_a_line_written_before_fused_workers_reads_as_a_process_of_one_lane():
    """A supervisor or standby of the release before writes no ``fused``: one stage, one lane."""
    import json

    assignment = Assignment(Attempt("m:j", "s", Epoch(1), 2, Path("r"), workers={"s": 2}, worker=1))
    doc = json.loads(assignment.to_line())
    del doc["attempt"]["fused"]
    read = Assignment.from_line(json.dumps(doc))
    assert read == assignment and read.attempt.lanes() == [assignment.attempt]
