"""A restarted supervisor adopts what its killed predecessor left running (runtime.supervisor.adoption): the
record, the refusals, a worker's wait for its adopter and the handle on a process that is not a child."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidemark.processes import process_start_time
from tidemark.runtime.supervisor.adoption import (
    AdoptedProcess,
    ProcessRecord,
    SupervisorRecord,
    adopt_line,
    adoption_refusal,
    control_fifo,
    exited_file,
    read_record,
    write_record,
)
from tidemark.runtime.job.attempt import Assignment, Attempt, release_line
from tidemark.runtime.worker.process import SupervisorLines
from tidemark.types import Epoch

IDENTITY = {"job_ref": "tidemark.examples.access_log:top_urls", "job_args": {"job_id": "j"}, "parallelism": None,
            "workers": None}


def me() -> ProcessRecord:
    return ProcessRecord(os.getpid(), process_start_time(os.getpid()) or 0)


def record(*, pid: int = 1, start_time: int = 0, processes: dict[str, ProcessRecord] | None = None,
           identity: dict | None = None) -> SupervisorRecord:
    return SupervisorRecord(
        job="j", pid=pid, start_time=start_time, identity=identity or IDENTITY, run_dir="/tmp/run",
        attempt={"index": 2, "epoch": 3, "restore_path": "j/chk-4/_metadata",
                                                  "restored_id": 4},
        origin={"index": 0, "epoch": 1, "restore_path": None, "restored_id": None}, baseline=0, parallelism=2,
        restarts=2, registered_at_ms=1_700_000_000_000,
        processes={"minute_counts": me()} if processes is None else processes,
        standbys={"minute_counts": ProcessRecord(123, 456)})


def test_the_record_survives_a_write_and_a_read(tmp_path: Path) -> None:
    written = record()
    path = tmp_path / "runs" / "j.supervisor.json"
    write_record(path, written)
    assert read_record(path) == written
    path.write_text("{not json")
    assert read_record(path) is None
    assert read_record(tmp_path / "none.json") is None


def test_only_a_dead_supervisors_live_attempt_of_the_same_command_is_adopted() -> None:
    dead_predecessor = {"pid": os.getpid(), "start_time": 1}  # this pid, another start: not the same process
    assert adoption_refusal(record(**dead_predecessor), IDENTITY, worker_hosts=False) is None
    alive = record(pid=os.getpid(), start_time=process_start_time(os.getpid()) or 0)
    assert "still running" in (adoption_refusal(alive, IDENTITY, worker_hosts=False) or "")
    other = {**IDENTITY, "parallelism": 4}
    assert "other job arguments" in (adoption_refusal(record(**dead_predecessor), other, worker_hosts=False) or "")
    gone = record(**dead_predecessor, processes={"minute_counts": me(), "top_urls": ProcessRecord(os.getpid(), 1)})
    assert adoption_refusal(gone, IDENTITY, worker_hosts=False) == "process(es) top_urls of its attempt are gone"
    assert adoption_refusal(record(**dead_predecessor, processes={}), IDENTITY, worker_hosts=False) == \
        "no attempt was running"
    assert adoption_refusal(record(**dead_predecessor), IDENTITY, worker_hosts=True) == "the job runs on worker hosts"
    unregistered = dataclasses.replace(record(**dead_predecessor), registered_at_ms=0)
    assert adoption_refusal(unregistered, IDENTITY, worker_hosts=False) == "its attempt had not registered"


def assignment(tmp_path: Path, epoch: int = 4) -> Assignment:
    return Assignment(Attempt("tidemark.examples.access_log:top_urls", "top_urls", Epoch(epoch), 2, tmp_path,
                              {"job_id": "j"}, None, {"top_urls": 1}, 0))


def fifo_writer(control: Path) -> AdoptedProcess:
    """This process as an adopter sees the worker (the worker being this test too)."""
    return AdoptedProcess(me(), control_fifo(control, os.getpid()), None)


def test_a_worker_whose_supervisor_is_gone_takes_its_adopters_lines(tmp_path: Path) -> None:
    control = tmp_path / "control"
    lines = SupervisorLines(io.StringIO(release_line(2).decode()), control_dir=control, adoption_window_s=5.0)
    lines.start()  # the stream ends at once: the supervisor that started the process is gone
    writer = fifo_writer(control)
    assert writer.stdin is not None
    time.sleep(0.3)
    assert lines.released(2) and not lines.released(3), "the attempt runs on while it waits"
    writer.stdin.write(adopt_line(os.getpid()))
    writer.stdin.write(release_line(3) + assignment(tmp_path).to_line())
    assert lines.next_assignment() == assignment(tmp_path)
    assert lines.released(3) and lines.is_alive(), "it follows the adopter for as long as that one lives"


def test_a_worker_nobody_adopts_ends_its_attempt_and_its_lines(tmp_path: Path) -> None:
    control = tmp_path / "control"
    lines = SupervisorLines(io.StringIO(""), control_dir=control, adoption_window_s=0.5)
    started = time.monotonic()
    lines.start()
    assert lines.next_assignment() is None
    assert 0.4 < time.monotonic() - started < 5.0
    assert lines.released(1 << 40), "the running attempt ends in place"
    assert not control_fifo(control, os.getpid()).exists()


def test_a_worker_waits_again_when_its_adopter_dies(tmp_path: Path) -> None:
    control = tmp_path / "control"
    adopter = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lines = SupervisorLines(io.StringIO(""), control_dir=control, adoption_window_s=0.5)
        lines.start()
        writer = fifo_writer(control)
        assert writer.stdin is not None
        writer.stdin.write(adopt_line(adopter.pid))
        time.sleep(1.0)
        assert lines.is_alive() and not lines.released(1), "adopted: no window runs"
        adopter.kill()
        adopter.wait()
        assert lines.next_assignment() is None, "its adopter died and nobody else came"
    finally:
        adopter.kill()


def test_a_process_that_is_not_a_child_is_watched_by_pid_and_its_exit_file(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = tmp_path / "w.epoch-3.exited"
    adopted = AdoptedProcess(ProcessRecord(child.pid, process_start_time(child.pid) or 0), tmp_path / "none.fifo",
                             exited)
    assert adopted.stdin is None, "no FIFO reader: nothing to write to"
    assert adopted.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        adopted.wait(timeout=0.1)
    exited.write_text("0")
    adopted.send_signal(signal.SIGTERM)
    child.wait()
    assert adopted.wait(timeout=5) == 0, "the status it wrote as it exited"
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    unknown = AdoptedProcess(ProcessRecord(killed.pid, process_start_time(killed.pid) or 0), tmp_path / "x", None)
    unknown.kill()
    killed.wait()
    assert unknown.wait(timeout=5) == -9, "no status written: taken for killed"


def test_an_adopted_process_handed_a_later_attempt_reports_its_exit_through_that_attempts_file(tmp_path: Path) -> None:
    from tidemark.runtime.placement.local_workers import LocalWorkers
    from tidemark.runtime.placement.pool import Launch

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    adopted = AdoptedProcess(ProcessRecord(child.pid, process_start_time(child.pid) or 0), tmp_path / "none.fifo",
                             exited_file(tmp_path, "w", 1))
    pool = LocalWorkers(tmp_path, adoptable=True)
    pool._released["w"] = (Attempt("m:j", "w", Epoch(1), 1, tmp_path), adopted)
    adopted.stdin = io.BytesIO()  # type: ignore[assignment]  # where the assignment line goes
    later = Launch("w", Assignment(Attempt("m:j", "w", Epoch(5), 1, tmp_path)))
    assert pool._start(later) is adopted, "the released process takes the next attempt in place"
    exited_file(tmp_path, "w", 5).write_text("0")  # a stop-with-savepoint's clean end of epoch 5
    child.kill()
    child.wait()
    assert adopted.wait(timeout=5) == 0, "read from epoch 1's file it would be taken for killed (-9)"


def test_a_worker_whose_attempt_raises_leaves_exit_status_1_for_an_adopter(tmp_path, monkeypatch):
    """An error escaping an attempt (not a fault point's SIGKILL) must not read as -9 to a
    supervisor that is not the process's parent: the process writes 1 to the attempt's exited file."""
    from tidemark.config.settings import TidemarkSettings
    from tidemark.runtime.worker import process as worker_process

    def failing(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(worker_process, "run_attempt", failing)
    attempt = Attempt("m:j", "w", Epoch(3), 1, tmp_path)
    stage = worker_process.StageProcess(TidemarkSettings(), SupervisorLines(io.StringIO("")))
    with pytest.raises(RuntimeError, match="boom"):
        stage.run(attempt)
    path = exited_file(tmp_path, attempt.process, 3)
    assert path.read_text() == "1"
    adopted = AdoptedProcess(ProcessRecord(999_999_999, 1), tmp_path / "no-fifo", path)
    assert adopted.poll() == 1
