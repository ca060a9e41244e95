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
