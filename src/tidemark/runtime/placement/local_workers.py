"""Worker processes on this machine: children of the supervisor (or of a worker host).

:class:`LocalWorkers` is the :class:`~tidemark.runtime.placement.pool.WorkerPool` whose processes are
started here. Each launch goes, in this order, to the process of the same name that the last
failover released (:meth:`LocalWorkers.release`: it ended its attempt in place and kept its
SparkSession, :mod:`tidemark.runtime.worker.process`), to its stage's warm standby
(:mod:`tidemark.runtime.worker.standby`), or to a new ``tidemark jobs worker``; the first two get the
attempt as one JSON line on their standard input. A process tells where it is through files in
the run directory (``<process>.epoch-<n>.ready`` / ``.processing`` / ``.released`` / ``.failed``,
:mod:`tidemark.runtime.job.attempt`) and its exit status; its output goes to
``<run_dir>/<process>.log``. A worker host's children die with it (``die_with_parent``); a
supervisor's (``adoptable``) run on when it is killed, for a restarted supervisor to adopt
(:mod:`tidemark.runtime.supervisor.adoption`: :meth:`LocalWorkers.adopt`, :meth:`LocalWorkers.records`).

With idle workers on (``idle``, :mod:`tidemark.runtime.placement.idle_workers`), a launch that
finds neither takes an idle worker an earlier run left before it starts a new process; a graceful
end releases the processes (they end their attempt in place, as at a failover) and ``close`` hands
the released ones and the standbys to the idle workers instead of killing them.

:meth:`LocalWorkers.metrics_ports` is what Prometheus should scrape of them (``/targets`` of the
supervisor's or the worker host's HTTP port, :mod:`tidemark.runtime.job.health`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tidemark.chassis.logs import get_logger
from tidemark.processes import die_with_parent, process_start_time, stop_process, stop_processes
from tidemark.runtime.supervisor.adoption import (
    AdoptedProcess,
    ProcessRecord,
    SupervisorRecord,
    adopt_line,
    control_fifo,
    exited_file,
)
from tidemark.runtime.job.attempt import Assignment, Attempt, release_line
from tidemark.runtime.job.physical_plan import reads_with_spark
from tidemark.runtime.job.start_errors import failed_file
from tidemark.runtime.placement.idle_workers import IdleOrder, IdleWorkers, run_variables
from tidemark.runtime.placement.pool import Launch, ProcessPhase, ProcessState

log = get_logger(__name__)
Process = subprocess.Popen[bytes] | AdoptedProcess  # a child, or a predecessor's child adopted
KILL_WAIT_S = 10.0  # within a pod's default 30 s grace period
RELEASE_WAIT_S = 10.0  # how long a launch waits for released processes to end their attempt


def worker_command(assignment: Assignment) -> list[str]:
    """``tidemark jobs worker`` for one attempt's process (the attempt as arguments)."""
    attempt = assignment.attempt
    command = [sys.executable, "-m", "tidemark.cli", "jobs", "worker", attempt.job_ref,
               "--stage", attempt.stage, "--epoch", str(attempt.epoch), "--parallelism", str(attempt.parallelism),
               "--run-dir", str(attempt.run_dir), "--job-args", json.dumps(attempt.job_args),
               "--workers", json.dumps(attempt.workers), "--worker", str(attempt.worker)]
    if attempt.restore_path:
        command += ["--restore", attempt.restore_path]
    if attempt.fused:
        command += ["--fused", attempt.fused]
    return command


class LocalWorkers:
    """See the module docstring. ``run_dir``: where the processes' logs go (each attempt's
    files go to its own ``Attempt.run_dir``)."""

    def __init__(self, run_dir: Path, *, adoptable: bool = False, idle: IdleOrder | None = None,
                 idle_max: int = 4) -> None:
        self.run_dir = run_dir
        self.adoptable = adoptable
        self.idle = idle if adoptable else None  # only a process with a control FIFO can be taken
        self.idle_max = idle_max
        self._launched: dict[str, tuple[Launch, Process]] = {}
        self._released: dict[str, tuple[Attempt, Process]] = {}  # ending their attempt
        self._standbys: dict[str, Process] = {}  # stage -> a warm worker
        self._logs: dict[int, Path] = {}  # pid -> where its output goes (a standby keeps its own log)
        self._standby = True

    @property
    def control_dir(self) -> Path:
        return self.run_dir / "control"

    # ------------------------------------------------------------------ adoption

    def records(self) -> tuple[dict[str, ProcessRecord], dict[str, ProcessRecord]]:
        """The attempt's live processes and the warm standbys, as a successor adopts them."""
        def record(process: Process, assignment: str = "") -> ProcessRecord | None:
            started = process_start_time(process.pid)
            return None if started is None or process.poll() is not None else ProcessRecord(
                process.pid, started, assignment)
        launched = {name: record(process, launch.assignment.to_line().decode().strip())
                    for name, (launch, process) in self._launched.items()}
        standbys = {stage: record(process) for stage, process in self._standbys.items()}
        return ({k: v for k, v in launched.items() if v is not None},
                {k: v for k, v in standbys.items() if v is not None})

    def adopt(self, record: SupervisorRecord, *, standby: bool) -> bool:
        """Take over the processes ``record`` lists (each is sent ``adopt <this pid>``); False,
        with nothing taken, when one of the attempt's processes cannot be reached. ``standby``:
        whether ``start_standbys`` starts new ones (as ``launch`` says for a launched attempt)."""
        self.run_dir = Path(record.run_dir)
        self._standby = standby
        line = adopt_line(os.getpid())
        launched: dict[str, tuple[Launch, Process]] = {}
        for name, entry in record.processes.items():
            assignment = Assignment.from_line(entry.assignment)
            attempt = assignment.attempt
            process = AdoptedProcess(entry, control_fifo(self.control_dir, entry.pid),
                                     exited_file(attempt.run_dir, name, attempt.epoch))
            if not _write(process, line):
                log.warning("an adopted worker cannot be reached", process=name, pid=entry.pid)
                return False
            launched[name] = (Launch(name, assignment), process)
            self._logs[entry.pid] = self.run_dir / f"{name}.log"
        for stage, entry in record.standbys.items():
            warm = AdoptedProcess(entry, control_fifo(self.control_dir, entry.pid), None)
            if _write(warm, line):
                self._standbys[stage] = warm
        self._launched = launched
        return True

    # ------------------------------------------------------------------ WorkerPool

    def launch(self, launches: Sequence[Launch], *, standby: bool) -> None:
        self._standby = standby
        self._await_released()
        self._launched = {launch.name: (launch, self._start(launch)) for launch in launches}
        for name, (_, process) in self._released.items():  # not needed by this attempt (a rescale)
            log.info("released worker not needed; ending it", process=name, pid=process.pid)
            stop_process(process, signal.SIGKILL)
        self._released.clear()

    def states(self) -> dict[str, ProcessState]:
        return {name: self._state(launch, process) for name, (launch, process) in self._launched.items()}

    def waiting_for(self) -> list[str]:
        return []

    def metrics_ports(self) -> dict[str, int]:
        """The metrics port of each process of the last launch that has not exited, by name:
        the ports served now (a process serves its port from when it takes the attempt). Called
        from the HTTP server's thread: it only reads what the pool's own thread last saw (the
        launch replaced as a whole, each exit status as ``states`` polled it), and never waits."""
        launched = self._launched
        return {name: launch.assignment.http_port for name, (launch, process) in launched.items()
                if launch.assignment.http_port is not None and process.returncode is None}

    def start_standbys(self) -> None:
        if not self._standby:
            return
        env = _worker_env()
        attempts = {launch.assignment.attempt.stage: launch.assignment.attempt for launch, _ in self._launched.values()}
        missing = [stage for stage in sorted(attempts)
                   if stage not in self._standbys or self._standbys[stage].poll() is not None]
        if missing:
            log.info("starting warm standbys", stages=missing)
        for stage in missing:
            command = [sys.executable, "-m", "tidemark.cli", "jobs", "standby", "--stage", stage]
            if not reads_with_spark(attempts[stage]):  # a stage reading only channels: its standby needs no JVM
                command.append("--no-session")
            self._standbys[stage] = self._start_process(f"{stage}.standby", command, env)

    def release(self) -> None:
        for name, (launch, process) in self._launched.items():
            if process.poll() is None:
                if _write(process, release_line(launch.assignment.attempt.epoch)):
                    self._released[name] = (launch.assignment.attempt, process)
                else:
                    stop_process(process, signal.SIGKILL)
        self._launched = {}

    def kill(self, *, graceful: bool) -> None:
        if graceful and self.idle is not None:  # they end the attempt in place, then go idle at close
            self.release()
            self._await_released()
            return
        stop_processes([process for _, process in self._launched.values()],
                       signal.SIGTERM if graceful else signal.SIGKILL, KILL_WAIT_S)

    def close(self) -> None:
        """Everything still running ends with the run (as with ``die_with_parent``; only a killed
        supervisor leaves processes for a successor to adopt), except what goes idle."""
        idle = self._go_idle() if self.idle is not None else []
        stop_processes([p for p in (*self._standbys.values(), *(p for _, p in self._released.values()),
                                    *(p for _, p in self._launched.values())) if p not in idle], signal.SIGKILL)
        self._standbys.clear()
        self._released.clear()

    @property
    def _idle_workers(self) -> IdleWorkers:
        assert self.idle is not None
        return IdleWorkers(Path(self.idle.dir))

    def _go_idle(self) -> list[Process]:
        """Hand the released processes and the standbys to the idle workers, as many as there is
        room for; the ones handed."""
        assert self.idle is not None
        self._await_released()
        room = self.idle_max - len(self._idle_workers.waiting(self.idle.fingerprint))
        handed: list[Process] = []
        for process in [*(p for _, p in self._released.values()), *self._standbys.values()]:
            if len(handed) >= room or not _write(process, self.idle.to_line()):
                continue
            handed.append(process)
            if isinstance(process, subprocess.Popen) and process.stdin is not None:
                process.stdin.close()  # the end of its input: it registers (an adopted one, when this process ends)
        if handed:
            log.info("worker processes handed to the idle workers", pids=[p.pid for p in handed], dir=self.idle.dir)
        return handed

    # ------------------------------------------------------------------ processes

    def pid(self, name: str) -> int | None:
        """The process id of a launched process (for logs)."""
        entry = self._launched.get(name)
        return entry[1].pid if entry else None

    def _state(self, launch: Launch, process: Process) -> ProcessState:
        attempt = launch.assignment.attempt
        where = str(self._logs.get(process.pid, self.run_dir / f"{launch.name}.log"))
        code = process.poll()
        if code is not None:
            reason_file = failed_file(attempt.run_dir, launch.name, attempt.epoch)
            reason = reason_file.read_text(encoding="utf-8").strip() if reason_file.exists() else ""
            return ProcessState(ProcessPhase.EXITED, code, reason, where)
        if attempt.processing_file.exists():
            return ProcessState(ProcessPhase.PROCESSING, log=where)
        if attempt.ready_file.exists():
            return ProcessState(ProcessPhase.READY, log=where)
        return ProcessState(ProcessPhase.STARTING, log=where)

    def _await_released(self) -> None:
        """Wait (``RELEASE_WAIT_S`` at most) until every released process has ended its attempt;
        one that has not by then is killed (a new process takes its place)."""
        deadline = time.monotonic() + RELEASE_WAIT_S
        waiting = dict(self._released)
        while waiting:
            for name, (attempt, process) in list(waiting.items()):
                if attempt.released_file.exists() or process.poll() is not None:
                    del waiting[name]
            if waiting and time.monotonic() > deadline:
                for name, (_, process) in waiting.items():
                    log.warning("released worker did not end its attempt in time; killing it", process=name,
                                pid=process.pid, waited_s=RELEASE_WAIT_S)
                    stop_process(process, signal.SIGKILL)
                break
            time.sleep(0.05)
        self._released = {name: entry for name, entry in self._released.items() if entry[1].poll() is None}

    def _start(self, launch: Launch) -> Process:
        """The process of this name that ended the last attempt in place, else the stage's warm
        standby, else a new worker."""
        assignment = launch.assignment
        attempt = assignment.attempt
        released = self._released.pop(launch.name, None)
        if released is not None and _write(released[1], assignment.to_line()):
            log.info("a released worker takes the attempt in place", stage=attempt.stage, worker=attempt.worker,
                     epoch=attempt.epoch, pid=released[1].pid)
            return _running(released[1], launch)
        standby = self._standbys.pop(attempt.stage, None)
        if standby is not None and _write(standby, assignment.to_line()):
            log.info("a warm standby takes the attempt", stage=attempt.stage, worker=attempt.worker,
                     epoch=attempt.epoch, pid=standby.pid)
            return _running(standby, launch)
        idle = self._take_idle(launch)
        if idle is not None:
            return idle
        env = _worker_env()
        if assignment.http_port is not None:
            env["TIDEMARK_HTTP_PORT"] = str(assignment.http_port)  # the worker's metrics
        if assignment.fault is not None:
            env["TIDEMARK_FAULT"] = assignment.fault
        return self._start_process(launch.name, worker_command(assignment), env)

    def _take_idle(self, launch: Launch) -> Process | None:
        """An idle worker of an earlier run, claimed and running the launch; None when none is
        waiting (or each claimed one refused)."""
        if self.idle is None:
            return None
        pool, fingerprint = self._idle_workers, self.idle.fingerprint
        attempt = launch.assignment.attempt
        path = self.run_dir / f"{launch.name}.log"
        assignment = replace(launch.assignment, env=run_variables(_worker_env()), log=str(path))
        while (worker := pool.claim(fingerprint)) is not None:
            process = AdoptedProcess(ProcessRecord(worker.pid, worker.start_time), Path(worker.fifo),
                                     exited_file(attempt.run_dir, launch.name, attempt.epoch))
            if (_write(process, adopt_line(os.getpid())) and _write(process, assignment.to_line())
                    and pool.accepted(fingerprint, worker)):
                log.info("an idle worker of an earlier run takes the attempt", stage=attempt.stage,
                         worker=attempt.worker, epoch=attempt.epoch, pid=worker.pid)
                self._logs[worker.pid] = path
                link = control_fifo(self.control_dir, worker.pid)  # where a successor of this supervisor looks
                link.parent.mkdir(parents=True, exist_ok=True)
                link.unlink(missing_ok=True)
                link.symlink_to(worker.fifo)
                return process
            stop_process(process, signal.SIGKILL)  # it refused (it exits), or cannot be reached
        return None

    def _start_process(self, name: str, command: list[str], env: dict[str, str]) -> Process:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        path = self.run_dir / f"{name}.log"
        if self.adoptable:
            command = [*command, "--control-dir", str(self.control_dir)]
        with open(path, "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, env=env,
                                       preexec_fn=None if self.adoptable else die_with_parent)
        self._logs[process.pid] = path
        return process


def _worker_env() -> dict[str, str]:
    """This process's environment as its workers get it: without its own HTTP port and fault
    (each launch sets the worker's)."""
    return {k: v for k, v in os.environ.items() if k not in ("TIDEMARK_HTTP_PORT", "TIDEMARK_FAULT")}


def _running(process: Process, launch: Launch) -> Process:
    """``process``, now running ``launch``: a process this supervisor did not start tells its exit
    status through the file of the attempt it runs."""
    if isinstance(process, AdoptedProcess):
        attempt = launch.assignment.attempt
        process.exited_file = exited_file(attempt.run_dir, launch.name, attempt.epoch)
    return process


def _write(process: Process, line: bytes) -> bool:
    """Hand a line to a live process; False when it is gone."""
    if process.poll() is not None or process.stdin is None:
        return False
    try:
        process.stdin.write(line)
        process.stdin.flush()
        return True
    except (BrokenPipeError, OSError) as exc:
        log.warning("worker process gone", pid=process.pid, error=str(exc))
        return False

