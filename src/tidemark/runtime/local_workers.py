"""Worker processes on this machine: children of the supervisor (or of a worker host).

:class:`LocalWorkers` is the :class:`~tidemark.runtime.worker_pool.WorkerPool` whose processes are
started here: each launch goes to the process's warm standby when one is waiting
(:mod:`tidemark.runtime.standby`, one JSON line on its standard input), else to a new
``tidemark jobs worker``. A process tells where it is through files in the run directory
(``<process>.epoch-<n>.ready`` / ``.processing`` / ``.failed``, :mod:`tidemark.runtime.stage_attempt`)
and its exit status; its output goes to ``<run_dir>/<process>.log``. Every child dies with its
parent (``die_with_parent``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tidemark.chassis.logs import get_logger
from tidemark.processes import die_with_parent
from tidemark.runtime.stage_attempt import Assignment
from tidemark.runtime.start_errors import failed_file
from tidemark.runtime.worker_pool import Launch, ProcessPhase, ProcessState

log = get_logger(__name__)
KILL_WAIT_S = 10.0  # within a pod's default 30 s grace period


def worker_command(assignment: Assignment) -> list[str]:
    """``tidemark jobs worker`` for one attempt's process (the attempt as arguments)."""
    attempt = assignment.attempt
    command = [sys.executable, "-m", "tidemark.cli", "jobs", "worker", attempt.job_ref,
               "--stage", attempt.stage, "--epoch", str(attempt.epoch), "--parallelism", str(attempt.parallelism),
               "--run-dir", str(attempt.run_dir), "--job-args", json.dumps(attempt.job_args),
               "--workers", json.dumps(attempt.workers), "--worker", str(attempt.worker)]
    if attempt.restore_path:
        command += ["--restore", attempt.restore_path]
    return command


class LocalWorkers:
    """See the module docstring. ``run_dir``: where the processes' logs go (each attempt's
    files go to its own ``Attempt.run_dir``)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._launched: dict[str, tuple[Launch, subprocess.Popen[bytes]]] = {}
        self._standbys: dict[str, subprocess.Popen[bytes]] = {}  # process name -> a warm worker
        self._standby = True

    # ------------------------------------------------------------------ WorkerPool

    def launch(self, launches: Sequence[Launch], *, standby: bool) -> None:
        self._standby = standby
        self._launched = {launch.name: (launch, self._start(launch)) for launch in launches}

    def states(self) -> dict[str, ProcessState]:
        return {name: self._state(launch, process) for name, (launch, process) in self._launched.items()}

    def waiting_for(self) -> list[str]:
        return []

    def start_standbys(self) -> None:
        if not self._standby:
            return
        env = {k: v for k, v in os.environ.items() if k not in ("TIDEMARK_HTTP_PORT", "TIDEMARK_FAULT")}
        missing = [name for name in self._launched
                   if name not in self._standbys or self._standbys[name].poll() is not None]
        if missing:
            log.info("starting warm standbys", processes=missing)
        for name in missing:
            command = [sys.executable, "-m", "tidemark.cli", "jobs", "standby", "--stage", name]
            self._standbys[name] = self._start_process(name, command, env, stdin=subprocess.PIPE)

    def kill(self, *, graceful: bool) -> None:
        processes = [process for _, process in self._launched.values()]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        for process in processes:
            try:
                process.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def close(self) -> None:
        for process in self._standbys.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        self._standbys.clear()

    # ------------------------------------------------------------------ processes

    def pid(self, name: str) -> int | None:
        """The process id of a launched process (for logs)."""
        entry = self._launched.get(name)
        return entry[1].pid if entry else None

    def _state(self, launch: Launch, process: subprocess.Popen[bytes]) -> ProcessState:
        attempt = launch.assignment.attempt
        where = str(self.run_dir / f"{launch.name}.log")
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

    def _start(self, launch: Launch) -> subprocess.Popen[bytes]:
        """The process's warm standby takes the attempt when there is one; else a new worker."""
        assignment = launch.assignment
        standby = self._standbys.pop(launch.name, None)
        if standby is not None and standby.poll() is None:
            try:
                assert standby.stdin is not None
                standby.stdin.write(assignment.to_line())
                standby.stdin.flush()
                log.info("a warm standby takes the attempt", stage=assignment.attempt.stage,
                         worker=assignment.attempt.worker, epoch=assignment.attempt.epoch, pid=standby.pid)
                return standby
            except (BrokenPipeError, OSError) as exc:  # it died meanwhile: start a worker instead
                log.warning("standby gone; starting a worker", stage=assignment.attempt.stage, error=str(exc))
        env = dict(os.environ)
        env.pop("TIDEMARK_FAULT", None)
        if assignment.http_port is not None:
            env["TIDEMARK_HTTP_PORT"] = str(assignment.http_port)  # the worker's metrics
        if assignment.fault is not None:
            env["TIDEMARK_FAULT"] = assignment.fault
        return self._start_process(launch.name, worker_command(assignment), env)

    def _start_process(self, name: str, command: list[str], env: dict[str, str],
                       stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / f"{name}.log", "ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=stdin, env=env,
                                    preexec_fn=die_with_parent)
