"""Idle workers (runtime.placement.idle_workers): one claimer wins a registration, a claim and an
expiry never both win, an unaccepted claim is given up; a worker process's lines thread registers
once its supervisor lets it go, takes a claimer's assignment, refuses when its code changed and
exits when nobody comes."""

from __future__ import annotations

import importlib
import io
import os
import sys
import time
from pathlib import Path

from tidemark.processes import process_start_time
from tidemark.runtime.job.attempt import Assignment, Attempt, release_line
from tidemark.runtime.placement.idle_workers import IdleOrder, IdleWorker, IdleWorkers
from tidemark.runtime.supervisor.adoption import adopt_line, control_fifo
from tidemark.runtime.worker import loaded_code
from tidemark.runtime.worker.process import SupervisorLines
from tidemark.types import Epoch

FP = "f1"


def _me(fifo: str = "fifo") -> IdleWorker:
    return IdleWorker(os.getpid(), process_start_time(os.getpid()) or 0, fifo)


def _assignment(epoch: int = 1) -> Assignment:
    return Assignment(Attempt("m:j", "count_hits", Epoch(epoch), 2, Path("run")),
                      env={"TIDEMARK_TOPIC_PREFIX": "other"}, log="/tmp/other/count_hits.log")


def test_one_claimer_wins_and_the_worker_accepts(tmp_path):
    pool = IdleWorkers(tmp_path)
    pool.register(FP, _me())
    assert pool.waiting(FP) == [_me()]
    assert pool.claim(FP) == _me()
    assert pool.claim(FP) is None  # taken
    assert not pool.withdraw(FP, os.getpid())  # an expiry after the claim loses
    assert pool.accept(FP, os.getpid())
    assert pool.accepted(FP, _me(), timeout_s=0.1)


def test_an_expiry_before_the_claim_wins(tmp_path):
    pool = IdleWorkers(tmp_path)
    pool.register(FP, _me())
    assert pool.withdraw(FP, os.getpid())
    assert pool.claim(FP) is None
    assert not list(tmp_path.rglob("*.*"))


def test_dead_registrations_are_dropped_and_fingerprints_kept_apart(tmp_path):
    pool = IdleWorkers(tmp_path)
    pool.register(FP, IdleWorker(os.getpid(), 1, "fifo"))  # the pid reused by another process
    pool.register("other", _me())
    assert pool.claim(FP) is None
    assert not list((tmp_path / FP).glob("*.json"))
    assert pool.waiting("other") == [_me()]


def test_a_claim_not_accepted_in_time_is_given_up(tmp_path):
    pool = IdleWorkers(tmp_path)
    pool.register(FP, _me())
    worker = pool.claim(FP)
    assert worker is not None
    assert not pool.accepted(FP, worker, timeout_s=0.1)
    assert not pool.accept(FP, os.getpid())  # too late: the worker must not run it


def test_the_assignment_carries_the_new_runs_environment_and_log():
    line = _assignment().to_line()
    assert Assignment.from_line(line.decode()) == _assignment()
    assert IdleOrder.from_text(IdleOrder("/d", 5, FP).to_line().decode().split(" ", 1)[1]) == IdleOrder("/d", 5, FP)


def _going_idle(tmp_path: Path, keep_s: float, *before: bytes) -> SupervisorLines:
    order = IdleOrder(str(tmp_path / "idle"), keep_s, FP)
    lines = SupervisorLines(io.StringIO(b"".join((*before, order.to_line())).decode()),
                            control_dir=tmp_path / "control")
    lines.start()
    return lines


def _claim_and_hand(tmp_path: Path, assignment: Assignment) -> bool:
    pool = IdleWorkers(tmp_path / "idle")
    deadline = time.monotonic() + 5
    while (worker := pool.claim(FP)) is None:
        assert time.monotonic() < deadline, "the process never registered"
        time.sleep(0.02)
    fd = os.open(control_fifo(tmp_path / "control", os.getpid()), os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, adopt_line(os.getpid()) + assignment.to_line())
    os.close(fd)
    return pool.accepted(FP, worker)


def test_a_released_process_goes_idle_and_takes_a_claimers_assignment_with_its_epochs_anew(tmp_path):
    lines = _going_idle(tmp_path, 10, release_line(7))
    assert lines.released(3)
    assert _claim_and_hand(tmp_path, _assignment(1))
    assert lines.next_assignment() == _assignment(1)
    assert not lines.released(1), "the earlier run's releases apply to the new run's epochs"


def test_a_process_whose_imported_code_changed_refuses(tmp_path, monkeypatch):
    module = tmp_path / "code" / "some_job_module.py"
    module.parent.mkdir()
    module.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(module.parent))
    importlib.import_module("some_job_module")
    loaded_code.note()
    lines = _going_idle(tmp_path, 10)
    deadline = time.monotonic() + 5
    while not IdleWorkers(tmp_path / "idle").waiting(FP):  # registered: its code was unchanged then
        assert time.monotonic() < deadline
        time.sleep(0.02)
    later = time.time() + 5
    os.utime(module, (later, later))
    assert loaded_code.changed() == str(module)
    try:
        assert not _claim_and_hand(tmp_path, _assignment())
        assert lines.next_assignment() is None  # the process exits
    finally:
        sys.modules.pop("some_job_module", None)
        os.utime(module, None)
        loaded_code._seen.pop(str(module), None)


def test_an_idle_process_nobody_takes_withdraws_and_exits(tmp_path):
    lines = _going_idle(tmp_path, 0.5)
    lines.join(5)
    assert not lines.is_alive()
    assert lines.next_assignment() is None
    assert not list((tmp_path / "idle").rglob("*.json"))


def test_without_an_idle_order_an_ended_input_ends_a_waiting_process(tmp_path):
    lines = SupervisorLines(io.StringIO(""), control_dir=tmp_path / "control", adoption_window_s=0.3)
    lines.start()
    lines.join(5)
    assert lines.next_assignment() is None
    assert not (tmp_path / "idle").exists()
