"""A restarted supervisor adopts the attempt its killed predecessor left running.

A job's worker processes do not die with their supervisor (``tidemark jobs run`` on this machine,
:class:`~tidemark.runtime.placement.local_workers.LocalWorkers`): when it is killed they run on, and the next
supervisor of the job started on the machine (the same command again: a restarted pod, a service
manager) takes them over instead of failing the attempt over, so a supervisor's death costs no
restore, no new JVM and no lost work, only the seconds its successor needs to start.

* **The record.** The supervisor keeps ``<home>/runs/<job>.supervisor.json``
  (:class:`SupervisorRecord`): its pid and start time, the command's identity (job, arguments,
  parallelism, workers), the running attempt and its planner state, and each worker process and
  warm standby (pid, start time, the assignment it runs). It is rewritten at each change and
  removed when the run ends.
* **The successor** reads it at start. When the predecessor is provably dead (its pid gone or
  reused), the command is the same, its attempt was registered and every one of its processes
  lives, the successor adopts: it sends ``adopt <pid>`` to each process's control FIFO, watches
  them by pid and goes on watching the attempt (:func:`adoption_refusal` says why not otherwise;
  then the predecessor's processes are stopped before anything starts).
* **The workers.** A worker's standard input ends when its supervisor dies
  (:class:`~tidemark.runtime.worker.process.SupervisorLines`). It then opens its FIFO
  (:func:`control_fifo`, in the directory its ``--control-dir`` names) and waits ``adoption_window_s`` for an
  ``adopt`` line, running its attempt meanwhile; adopted, it reads the successor's lines there and
  watches the successor's pid as it watched its standard input. Not adopted in time, it ends its
  attempt and exits (what it did after the last completed checkpoint is rolled back by the next
  restore, as for a killed worker), so no process outlives its job by more than the window.

The coordinator sees the job's heartbeats stop for the seconds between (it reports the job FAILED
only after ``TIDEMARK_SUPERVISOR_SILENCE_MS``, and RUNNING again at the successor's first
heartbeat, which carries the same epoch).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from tidemark.processes import process_start_time
from tidemark.runtime.job.attempt import stage_file

ADOPT = "adopt"  # the line a successor sends: ``adopt <its pid>``


def record_path(home: Path, job: str) -> Path:
    return home / "runs" / f"{job}.supervisor.json"


def control_fifo(control_dir: Path, pid: int) -> Path:
    """The FIFO process ``pid`` reads its adopter's lines from."""
    return control_dir / f"{pid}.fifo"


def adopt_line(pid: int) -> bytes:
    return f"{ADOPT} {pid}\n".encode()


@dataclass(frozen=True)
class ProcessRecord:
    """One process the supervisor runs: a worker of the attempt (with the assignment line it
    runs) or a warm standby (no assignment)."""

    pid: int
    start_time: int
    assignment: str = ""  # Assignment.to_line(), without the newline

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


@dataclass(frozen=True)
class SupervisorRecord:
    """What a successor needs to adopt the running attempt (see the module docstring)."""

    job: str
    pid: int
    start_time: int
    identity: dict[str, Any]  # job_ref, job_args, parallelism option, workers option: the command
    run_dir: str
    attempt: dict[str, Any]  # AttemptState fields
    origin: dict[str, Any] | None  # the planner's origin (AttemptState fields)
    baseline: int
    parallelism: int
    restarts: int
    registered_at_ms: int  # when the attempt registered: signals about it are read from there
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    standbys: dict[str, ProcessRecord] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SupervisorRecord:
        doc = json.loads(text)
        doc["processes"] = {k: ProcessRecord(**v) for k, v in doc["processes"].items()}
        doc["standbys"] = {k: ProcessRecord(**v) for k, v in doc["standbys"].items()}
        return cls(**doc)

    def predecessor_alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


def write_record(path: Path, record: SupervisorRecord) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(record.to_json(), encoding="utf-8")
    os.replace(temporary, path)


def read_record(path: Path) -> SupervisorRecord | None:
    """The record at ``path``; None when there is none or it does not parse (then nothing is adopted)."""
    try:
        return SupervisorRecord.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def adoption_refusal(record: SupervisorRecord, identity: dict[str, Any], *, worker_hosts: bool) -> str | None:
    """Why the running attempt of ``record`` cannot be adopted by a supervisor started with
    ``identity``; None when it can."""
    if worker_hosts:
        return "the job runs on worker hosts"
    if record.predecessor_alive():
        return f"its supervisor (pid {record.pid}) is still running"
    if record.identity != identity:
        return "it was started with other job arguments, parallelism or workers"
    if not record.processes:
        return "no attempt was running"
    if not record.registered_at_ms:
        return "its attempt had not registered"
    dead = sorted(name for name, process in record.processes.items() if not process.alive())
    if dead:
        return f"process(es) {', '.join(dead)} of its attempt are gone"
    return None


class AdoptedProcess:
    """A worker process this supervisor did not start, with what the pool uses of ``Popen``: its
    lines go to its control FIFO, its exit status comes from its ``exited`` file (-9 when it died
    without writing one)."""

    def __init__(self, record: ProcessRecord, fifo: Path, exited_file: Path | None) -> None:
        self.pid = record.pid
        self._record = record
        self.exited_file = exited_file  # the running attempt's: LocalWorkers moves it with each attempt handed
        self.returncode: int | None = None
        self.stdin: BinaryIO | None = _open_fifo(fifo)

    def poll(self) -> int | None:
        if self.returncode is None and not self._record.alive():
            self.returncode = self._exit_code()
            if self.stdin is not None:
                try:
                    self.stdin.close()
                except OSError:
                    pass
                self.stdin = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _exit_code(self) -> int:
        try:
            return int(self.exited_file.read_text().strip()) if self.exited_file is not None else -9
        except (OSError, ValueError):
            return -9


def exited_file(run_dir: Path, process: str, epoch: int) -> Path:
    """Written by a worker process as it exits: the exit status of its last attempt (a process
    that is not the supervisor's child tells its status so)."""
    return stage_file(run_dir, process, epoch, "exited")


def _open_fifo(fifo: Path) -> BinaryIO | None:
    """The FIFO opened for writing; None when no process reads it (gone, or not waiting)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return None
    os.set_blocking(fd, True)
    return os.fdopen(fd, "wb", buffering=0)


def stop_left_processes(record: SupervisorRecord) -> list[int]:
    """SIGKILL every recorded process that still lives, unless the recorded supervisor does (then
    another supervisor runs the job and nothing is touched); the pids signalled."""
    if record.predecessor_alive():
        return []
    signalled = []
    for process in (*record.processes.values(), *record.standbys.values()):
        if process.alive():
            try:
                os.kill(process.pid, signal.SIGKILL)
                signalled.append(process.pid)
            except ProcessLookupError:
                pass
    return signalled
