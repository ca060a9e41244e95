"""Job runs started through the operator API: ``tidemark jobs run`` processes that outlive the coordinator.

Lifecycle: ``LocalLauncher(settings, bootstrap)`` once while the coordinator is built (only with
``TIDEMARK_JOBS__LAUNCHER=local``; it re-adopts the runs a previous coordinator left running) ->
``start(request)`` per ``POST /api/v1/runs`` -> ``reap()`` periodically and before every answer
(collects exit codes) -> ``cancel(run)`` per ``DELETE`` (SIGTERM: the supervisor stops its
workers and exits 143).

A run is not tied to the coordinator's life: its supervisor starts in a session of its own
(``start_new_session``, no parent-death signal), so neither a coordinator that is killed nor one
that stops (SIGTERM, an upgrade) takes it down; only ``DELETE /api/v1/runs/{id}`` stops it. Its
workers end with the supervisor (a killed one's after ``adoption_window_s``, when no successor
adopts them: :mod:`tidemark.runtime.supervisor.adoption`). Every run is recorded in
``<home>/job-runs/<run_id>.json`` (rewritten atomically at start, cancel and exit): a restarted
coordinator lists the runs again and re-adopts those still running by pid, checking the pid's
start time in ``/proc`` so a recycled pid is never taken for the run. A re-adopted run is not
this process's child: its exit code cannot be collected, so when it ends it shows ``EXITED``
with ``exit_code`` null (its log and the job's state say how it ended).

A run gets the coordinator's own deployment settings as environment (Kafka, topic prefix, home,
checkpoint storage, API token, ...; resolved, so a YAML config file is not needed and not
passed), ``TIDEMARK_COORDINATOR_URL`` pointing at this coordinator, and writes its output to
``<home>/logs/runs/<run_id>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tidemark.clock import now_ms
from tidemark.processes import process_start_time
from tidemark.config.settings import CONFIG_FILE_ENV, TidemarkSettings
from tidemark.chassis.logs import get_logger
from tidemark.services.coordinator.settings import CoordinatorSettings
from tidemark.start_request import StartRequest
from tidemark.types import JobId

log = get_logger(__name__)
EXITED_RUNS_KEPT = 100
RUN_LOG_DIR = "logs/runs"
RUN_RECORD_DIR = "job-runs"
_COORDINATOR_ONLY = tuple(sorted(set(CoordinatorSettings.model_fields) - set(TidemarkSettings.model_fields)))


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """What to run: a catalog reference with its arguments, the job id it resolved to, the
    parallelism (the job's default when the request gave none) and how it starts
    (:mod:`tidemark.start_request`)."""

    reference: str
    args: dict[str, Any]
    job_id: JobId
    parallelism: int
    start: StartRequest = StartRequest()


@dataclass
class JobRun:
    """One started run. ``process`` is None for a run re-adopted after a coordinator restart (not
    our child); ``exit_code`` is None while it runs, and also after a re-adopted run ended (unknown);
    a run killed by signal N exits 128+N."""

    run_id: str
    request: LaunchRequest
    pid: int
    pid_started: int | None  # the pid's start time (process_start_time)
    started_at: int
    log_path: str  # relative to the coordinator's home
    run_dir: str  # the supervisor's directory (stage worker logs), relative to home
    process: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    ended_at: int | None = None
    cancel_requested_at: int | None = None

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def poll(self) -> bool:
        """Collect the exit status; True when the run was just seen to have exited."""
        if self.ended_at is not None:
            return False
        if self.process is not None:
            code = self.process.poll()
            if code is None:
                return False
            self.exit_code = code if code >= 0 else 128 - code
        elif self.alive():
            return False
        self.ended_at = now_ms()
        return True

    def alive(self) -> bool:
        started = process_start_time(self.pid)
        return started is not None and started == self.pid_started

    def signal(self, sig: int) -> None:
        if self.process is not None:
            self.process.send_signal(sig)
        elif self.alive():
            os.kill(self.pid, sig)


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
        **request.start.api_fields(),
        "pid": run.pid,
        "status": "RUNNING" if run.running else "EXITED",
        "adopted": run.process is None,
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


def run_record(run: JobRun) -> dict[str, Any]:
    """What ``<home>/job-runs/<run_id>.json`` holds: the run's document and its pid's start time."""
    record = run_document(run)
    del record["adopted"]
    return {**record, "pid_started": run.pid_started}


def run_from_record(record: Mapping[str, Any]) -> JobRun:
    """The run a record describes, as a run of this coordinator re-adopted (no child process)."""
    request = LaunchRequest(record["reference"], dict(record["args"]), JobId(record["job"]), int(record["parallelism"]),
                            StartRequest.from_api_fields(record))
    return JobRun(record["run_id"], request, int(record["pid"]), record["pid_started"], int(record["started_at"]),
                  record["log_path"], record["run_dir"], None, record["exit_code"], record["ended_at"],
                  record["cancel_requested_at"])


class LocalLauncher:
    """Starts, watches and stops the runs of one coordinator (see the module lifecycle)."""

    def __init__(self, settings: CoordinatorSettings, bootstrap: str, *,
                 environ: Mapping[str, str] | None = None) -> None:
        self.home = settings.home.resolve()
        self.env = child_env(settings, bootstrap, os.environ if environ is None else environ)
        self.records = self.home / RUN_RECORD_DIR
        self.runs: dict[str, JobRun] = {run.run_id: run for run in self._recorded()}  # in start order
        self.reap()

    def _recorded(self) -> list[JobRun]:
        """The runs recorded by earlier coordinators in this home, oldest first; an unreadable
        record is logged and skipped."""
        runs = []
        for path in sorted(self.records.glob("*.json")) if self.records.is_dir() else []:
            try:
                runs.append(run_from_record(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("job run record unreadable; skipped", path=str(path), error=str(exc))
        runs.sort(key=lambda run: run.started_at)
        for run in runs:
            if run.running:
                log.info("job run re-adopted", run_id=run.run_id, job=run.request.job_id, pid=run.pid)
        return runs

    def _save(self, run: JobRun) -> None:
        self.records.mkdir(parents=True, exist_ok=True)
        path = self.records / f"{run.run_id}.json"
        temporary = path.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(run_record(run)), encoding="utf-8")
        os.replace(temporary, path)

    def command(self, request: LaunchRequest) -> list[str]:
        command = [sys.executable, "-m", "tidemark.cli", "jobs", "run", request.reference,
                   "--job-args", json.dumps(request.args), "--parallelism", str(request.parallelism)]
        return command + request.start.command_line()

    def start(self, request: LaunchRequest) -> JobRun:
        run_id = uuid.uuid4().hex
        log_path = f"{RUN_LOG_DIR}/{run_id}.log"
        (self.home / RUN_LOG_DIR).mkdir(parents=True, exist_ok=True)
        with open(self.home / log_path, "ab") as out:
            process = subprocess.Popen(self.command(request), stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=self.env, start_new_session=True)
        run = JobRun(run_id, request, process.pid, process_start_time(process.pid), now_ms(), log_path,
                     f"runs/{request.job_id}-{process.pid}", process)
        self.runs[run_id] = run
        self._save(run)
        log.info("job run started", run_id=run_id, job=request.job_id, reference=request.reference,
                 pid=process.pid, log=log_path)
        return run

    def reap(self) -> list[JobRun]:
        """Collect exit codes; the runs that just exited. Forgets the oldest exited runs beyond
        :data:`EXITED_RUNS_KEPT` (and their records)."""
        exited = [run for run in self.runs.values() if run.poll()]
        for run in exited:
            self._save(run)
            log.info("job run exited", run_id=run.run_id, job=run.request.job_id, pid=run.pid,
                     exit_code=run.exit_code, cancelled=run.cancel_requested_at is not None,
                     adopted=run.process is None)
        finished = [run_id for run_id, run in self.runs.items() if not run.running]
        for run_id in finished[:max(0, len(finished) - EXITED_RUNS_KEPT)]:
            del self.runs[run_id]
            (self.records / f"{run_id}.json").unlink(missing_ok=True)
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
        run.signal(signal.SIGTERM)
        if run.cancel_requested_at is None:
            run.cancel_requested_at = now_ms()
            self._save(run)
        log.info("job run cancel requested", run_id=run.run_id, job=run.request.job_id, pid=run.pid)


__all__ = ["JobRun", "LaunchRequest", "LocalLauncher", "child_env", "coordinator_url"]
