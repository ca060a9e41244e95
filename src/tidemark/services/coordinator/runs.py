"""Job runs started through the operator API: ``tidemark jobs run`` child processes of the coordinator.

Lifecycle: ``LocalLauncher(settings, bootstrap)`` once while the coordinator is built (only with
``TIDEMARK_JOBS__LAUNCHER=local``) -> ``start(request)`` per ``POST /api/v1/runs``, on the
event-loop (main) thread -> ``reap()`` periodically and before every answer (collects exit
codes) -> ``cancel(run)`` per ``DELETE`` (SIGTERM: the supervisor stops its workers and exits
143) -> ``shutdown()`` when the coordinator stops (SIGTERM to every running run, SIGKILL after a
bounded wait).

Every child is started with ``PR_SET_PDEATHSIG=SIGKILL``, so it dies with the coordinator even
when the coordinator is killed; the supervisor ties its workers to itself the same way. The
signal fires when the *thread* that forked exits, which is why ``start`` refuses to run off the
main thread. Runs live in this process's memory only: after a coordinator restart the list is
empty (the runs died with it).

A run gets the coordinator's own deployment settings as environment (Kafka, topic prefix, home,
checkpoint storage, API token, ...; resolved, so a YAML config file is not needed and not
passed), ``TIDEMARK_COORDINATOR_URL`` pointing at this coordinator, and writes its output to
``<home>/logs/runs/<run_id>.log``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tidemark.clock import now_ms
from tidemark.processes import die_with_parent
from tidemark.config.settings import CONFIG_FILE_ENV, TidemarkSettings
from tidemark.chassis.logs import get_logger
from tidemark.services.coordinator.settings import CoordinatorSettings
from tidemark.types import CheckpointId, JobId

log = get_logger(__name__)
EXITED_RUNS_KEPT = 100
RUN_LOG_DIR = "logs/runs"
_COORDINATOR_ONLY = tuple(sorted(set(CoordinatorSettings.model_fields) - set(TidemarkSettings.model_fields)))


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What to run: a catalog reference with its arguments, the job id it resolved to, the
    parallelism (the job's default when the request gave none) and how it starts, as the
    options of ``tidemark jobs run``: an optional restore source, ``fresh`` (empty state),
    ``force`` (start as asked over committed output or newer state)."""

    reference: str
    args: dict[str, Any]
    job_id: JobId
    parallelism: int
    from_checkpoint: CheckpointId | None = None
    from_savepoint: str | None = None
    fresh: bool = False
    force: bool = False


@dataclass
class JobRun:
    """One started run. ``exit_code`` is None while it runs; a run killed by signal N exits 128+N."""

    run_id: str
    request: LaunchRequest
    process: subprocess.Popen[bytes]
    started_at: int
    log_path: str  # relative to the coordinator's home
    run_dir: str  # the supervisor's directory (stage worker logs), relative to home
    exit_code: int | None = None
    ended_at: int | None = None
    cancel_requested_at: int | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def poll(self) -> bool:
        """Collect the exit status; True when the run was just seen to have exited."""
        if self.exit_code is not None:
            return False
        code = self.process.poll()
        if code is None:
            return False
        self.exit_code = code if code >= 0 else 128 - code
        self.ended_at = now_ms()
        return True


def run_document(run: JobRun) -> dict[str, Any]:
    """A job run the coordinator started: ``status`` RUNNING, or EXITED with ``exit_code``
    (128+N when killed by signal N, so 143 after a cancel). Paths are relative to the
    coordinator's home."""
    request = run.request
    return {
        "run_id": run.run_id,
        "reference": request.reference,
        "job": request.job_id,
        "args": request.args,
        "parallelism": request.parallelism,
        "from_checkpoint": request.from_checkpoint,
        "from_savepoint": request.from_savepoint,
        "fresh": request.fresh,
        "force": request.force,
        "pid": run.pid,
        "status": "RUNNING" if run.running else "EXITED",
        "exit_code": run.exit_code,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "cancel_requested_at": run.cancel_requested_at,
        "log_path": run.log_path,
        "run_dir": run.run_dir,
    }


def coordinator_url(settings: TidemarkSettings) -> str:
    """Where a run on this machine reaches the coordinator's HTTP port."""
    host = settings.http_host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.http_port}"


def _env_value(value: Any) -> str:
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value)
    return str(value)


def child_env(settings: CoordinatorSettings, bootstrap: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a run: ``environ`` without the config file, the HTTP port and the
    coordinator-only keys, plus every deployment setting as the coordinator resolved it."""
    managed: dict[str, str | None] = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "BOOTSTRAP_SERVERS": None,
                                      "TIDEMARK_COORDINATOR_URL": coordinator_url(settings),
                                      "TIDEMARK_HTTP_PORT": None, CONFIG_FILE_ENV: None, "TIDEMARK_FAULT": None}
    prefixes = [f"TIDEMARK_{name.upper()}__" for name in _COORDINATOR_ONLY]
    for name in TidemarkSettings.model_fields:
        if name in ("http_port", "bootstrap_servers"):
            continue
        value = settings.resolved_storage_url if name == "checkpoint_storage_url" else getattr(settings, name)
        key = f"TIDEMARK_{name.upper()}"
        if isinstance(value, BaseModel):
            prefixes.append(f"{key}__")
            managed.update({f"{key}__{sub.upper()}": None if v is None else _env_value(v)
                            for sub, v in value.model_dump().items()})
        else:
            managed[key] = None if value is None else _env_value(value)
    managed.update({f"TIDEMARK_{name.upper()}": None for name in _COORDINATOR_ONLY})
    env = {key: value for key, value in environ.items()
           if key.upper() not in managed and not key.upper().startswith(tuple(prefixes))}
    env.update({key: value for key, value in managed.items() if value is not None})
    return env


class LocalLauncher:
    """Starts, watches and stops the runs of one coordinator (see the module lifecycle)."""

    def __init__(self, settings: CoordinatorSettings, bootstrap: str, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.home = settings.home.resolve()
        self.env = child_env(settings, bootstrap, os.environ if environ is None else environ)
        self.runs: dict[str, JobRun] = {}  # in start order
        self.stop_timeout_s = max(1.0, settings.shutdown_timeout_s / 2)

    def command(self, request: LaunchRequest) -> list[str]:
        command = [sys.executable, "-m", "tidemark.cli", "jobs", "run", request.reference,
                   "--job-args", json.dumps(request.args), "--parallelism", str(request.parallelism)]
        if request.from_checkpoint is not None:
            command += ["--from-checkpoint", str(request.from_checkpoint)]
        if request.from_savepoint is not None:
            command += ["--from-savepoint", request.from_savepoint]
        command += ["--fresh"] if request.fresh else []
        command += ["--force"] if request.force else []
        return command

    def start(self, request: LaunchRequest) -> JobRun:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("runs must be started on the main thread (PR_SET_PDEATHSIG follows the forking thread)")
        run_id = uuid.uuid4().hex
        log_path = f"{RUN_LOG_DIR}/{run_id}.log"
        (self.home / RUN_LOG_DIR).mkdir(parents=True, exist_ok=True)
        with open(self.home / log_path, "ab") as out:
            process = subprocess.Popen(self.command(request), stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self.env, preexec_fn=die_with_parent)
        run = JobRun(run_id, request, process, now_ms(), log_path, f"runs/{request.job_id}-{process.pid}")
        self.runs[run_id] = run
        log.info("job run started", run_id=run_id, job=request.job_id, reference=request.reference,
                 pid=process.pid, log=log_path)
        return run

    def reap(self) -> list[JobRun]:
        """Collect exit codes; the runs that just exited. Forgets the oldest exited runs beyond
        :data:`EXITED_RUNS_KEPT`."""
        exited = [run for run in self.runs.values() if run.poll()]
        for run in exited:
            log.info("job run exited", run_id=run.run_id, job=run.request.job_id, pid=run.pid,
                     exit_code=run.exit_code, cancelled=run.cancel_requested_at is not None)
        finished = [run_id for run_id, run in self.runs.items() if not run.running]
        for run_id in finished[:max(0, len(finished) - EXITED_RUNS_KEPT)]:
            del self.runs[run_id]
        return exited

    async def reap_periodically(self) -> None:
        self.reap()

    def list(self) -> list[JobRun]:
        self.reap()
        return list(self.runs.values())

    def get(self, run_id: str) -> JobRun | None:
        self.reap()
        return self.runs.get(run_id)

    def running_for(self, job_id: JobId) -> JobRun | None:
        self.reap()
        return next((r for r in self.runs.values() if r.running and r.request.job_id == job_id), None)

    def cancel(self, run: JobRun) -> None:
        """SIGTERM the run's supervisor (which stops its workers); the caller checked it runs."""
        run.process.send_signal(signal.SIGTERM)
        if run.cancel_requested_at is None:
            run.cancel_requested_at = now_ms()
        log.info("job run cancel requested", run_id=run.run_id, job=run.request.job_id, pid=run.pid)

    async def shutdown(self, *_: Any, **__: Any) -> None:
        """Stop every running run: SIGTERM, then SIGKILL after ``stop_timeout_s``."""
        running = [run for run in self.list() if run.running]
        if not running:
            return
        log.info("stopping job runs", runs=[r.run_id for r in running], timeout_s=self.stop_timeout_s)
        for run in running:
            run.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(run.process.poll() is None for run in running) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for run in running:
            if run.process.poll() is None:
                log.warning("job run did not stop in time; killing it", run_id=run.run_id, pid=run.pid)
                run.process.kill()
                run.process.wait()
        self.reap()


__all__ = ["JobRun", "LaunchRequest", "LocalLauncher", "child_env", "coordinator_url"]
