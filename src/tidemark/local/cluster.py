"""Run the services as local processes on one machine (demo, integration tests).

Lifecycle: ``LocalCluster(home, bootstrap)`` -> ``start(names)`` (spawns ``tidemark run <name>``
per service, each on a free HTTP port, tied to this process so none outlives it) ->
``wait_ready()`` (a service that lost its picked port to another process before binding it starts
again on another) -> ... -> ``stop()`` (SIGTERM, bounded wait, SIGKILL). Use it as a context
manager so Ctrl-C or an exception at any moment still stops everything. Job runs started
through the coordinator's API outlive the coordinator (:mod:`tidemark.services.coordinator.runs`);
``stop()`` also stops those recorded in the home that still run (:func:`stop_job_runs`), so none
outlives the cluster either.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import httpx2

from tidemark.processes import die_with_parent, free_port, process_start_time, stop_process, stop_processes


PORT_RETRIES = 3  # starts on another free port when a service's picked port was taken before it bound it


class ServiceStartError(RuntimeError):
    """A service exited or did not become ready in time; the message carries its log tail."""


@dataclass
class LocalService:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    pinned: bool = False  # its port was asked for (a restart keeps the address); else picked free
    log_start: int = 0  # where this process's output begins in the log
    start_env: dict[str, str] = field(default_factory=dict)  # what start_one was given

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout_s: float = 2.0) -> tuple[int, bytes]:
        """``GET path``: status and body, errors included; ``OSError`` when the service does not
        answer (refused, timed out, closed)."""
        try:
            response = httpx2.get(self.url + path, timeout=timeout_s, follow_redirects=False)
        except httpx2.TransportError as exc:
            raise OSError(f"GET {self.url}{path}: {exc!r}") from exc
        return response.status_code, response.content

    def ready(self) -> bool:
        """``/readyz`` answers 200 and names this service (not another process on its port)."""
        try:
            code, body = self.get("/readyz")
            return code == 200 and json.loads(body).get("service") == self.name
        except (OSError, ValueError, AttributeError):
            return False

    def lost_its_port(self) -> bool:
        """It exited because another process bound its port first (a free port is only free
        until someone binds it: a test lane or a job on the same machine may pick it meanwhile)."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_start)
                return b"address already in use" in log.read()
        except OSError:
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"


def stop_job_runs(home: Path, timeout_s: float = 20.0) -> list[int]:
    """SIGTERM the job runs recorded in ``home/job-runs`` whose supervisor still runs (the same pid
    and start time), then SIGKILL their sessions after ``timeout_s``; the pids stopped."""
    running = []
    for path in sorted((home / "job-runs").glob("*.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            pid, started = int(record["pid"]), record["pid_started"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if record.get("status") == "RUNNING" and started is not None and process_start_time(pid) == started:
            running.append(pid)
    for pid in running:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(process_start_time(pid) is not None for pid in running) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in running:
        if process_start_time(pid) is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the run leads its own session
    return running


class LocalCluster:
    """Services of one deployment (one topic prefix) running as child processes."""

    def __init__(self, home: Path, bootstrap: str, *, topic_prefix: str = "tidemark",
                 env: dict[str, str] | None = None) -> None:
        self.home = Path(home)
        self.bootstrap = bootstrap
        self.topic_prefix = topic_prefix
        self.extra_env = dict(env or {})
        self.services: dict[str, LocalService] = {}

    def start(self, names: list[str], env: dict[str, str] | None = None) -> None:
        for name in names:
            self.start_one(name, env)

    def start_one(self, name: str, env: dict[str, str] | None = None, *, port: int | None = None) -> LocalService:
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        pinned = port is not None
        port = port or free_port()
        child_env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "TIDEMARK_TOPIC_PREFIX": self.topic_prefix,
            "TIDEMARK_HOME": str(self.home),
            "TIDEMARK_HTTP_PORT": str(port),
            **self.extra_env,
            **(env or {}),
        }
        log_path = logs / f"{name}.log"
        with open(log_path, "ab") as log:
            log_start = log.tell()
            process = subprocess.Popen(
                [sys.executable, "-m", "tidemark.cli", "run", name],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=child_env, preexec_fn=die_with_parent,
            )
        service = LocalService(name, port, process, log_path, child_env, pinned, log_start, dict(env or {}))
        self.services[name] = service
        return service

    def wait_ready(self, timeout_s: float = 60.0, names: list[str] | None = None) -> None:
        """Wait until each service answers ready; one that lost its picked port to another
        process before binding it starts again on another (``PORT_RETRIES`` times at most)."""
        deadline = time.monotonic() + timeout_s
        pending = list(names or self.services)
        retries = dict.fromkeys(pending, PORT_RETRIES)
        while pending:
            for name in list(pending):
                service = self.services[name]
                if service.process.poll() is not None:
                    if not service.pinned and retries[name] > 0 and service.lost_its_port():
                        retries[name] -= 1
                        self.start_one(name, service.start_env)
                        continue
                    raise ServiceStartError(
                        f"{name} exited with {service.process.returncode}:\n{service.log_tail()}")
                if service.ready():
                    pending.remove(name)
            if pending and time.monotonic() > deadline:
                tails = "\n".join(f"--- {n}\n{self.services[n].log_tail()}" for n in pending)
                raise ServiceStartError(f"not ready after {timeout_s}s: {pending}\n{tails}")
            time.sleep(0.2)

    def stop_one(self, name: str, *, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        return stop_process(self.services.pop(name).process, sig, timeout_s)

    def stop(self) -> dict[str, int]:
        """SIGTERM every service at once; their exit statuses once all have ended (each is SIGKILLed
        after 20 s). Then the job runs of the home that still run."""
        names = list(self.services)
        codes = dict(zip(names, stop_processes([self.services.pop(name).process for name in names])))
        stop_job_runs(self.home)
        return codes

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
