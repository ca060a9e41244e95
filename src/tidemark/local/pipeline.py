"""A whole local deployment for demos, tests and benchmarks: services, jobs, input, output.

Lifecycle: ``LocalPipeline(home, bootstrap)`` as a context manager starts the services (each a
child process, see :mod:`tidemark.local.cluster`) and waits until they are ready ->
``start_job(...)`` runs ``tidemark jobs run`` as a child process (the supervisor, which starts one
PySpark worker per stage) -> ``InputFeeder`` writes generated input while the job runs ->
``read_output`` / the verifiers check the result -> leaving the context stops jobs and services.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient

from tidemark.processes import die_with_parent, stop_process, stop_processes, tree_pids
from tidemark.runtime.supervisor.adoption import read_record, stop_left_processes
from tidemark.examples.generator import RecordWriter, generate
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.cluster import LocalCluster
from tidemark.local.quick_start import QUICK_START_ENV
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.start_request import StartRequest

DEFAULT_SERVICES = ("coordinator", "checkpoint-store")
JOB_STOP_S = 60.0  # how long a job gets to stop after SIGTERM, then SIGKILL
T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition",
             poll_s: float = 0.3) -> T:
    """Poll ``condition`` until it returns something truthy, and return that value;
    ``TimeoutError`` naming ``what`` (and the last value) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout_s:g}s (last: {value!r})")
        time.sleep(poll_s)


@dataclass
class JobRun:
    """A running ``tidemark jobs run`` process."""

    process: subprocess.Popen[bytes]
    log_path: Path

    def log_events(self) -> Iterator[dict[str, Any]]:
        """The supervisor's JSON log events."""
        return json_events(self.log_path.read_text(errors="replace"))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.log_events() if e.get("event") == name]

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout=timeout_s)

    def stop(self, timeout_s: float = JOB_STOP_S) -> int:
        return stop_process(self.process, signal.SIGTERM, timeout_s)

    def kill_tree(self) -> list[int]:
        """SIGKILL the supervisor and every process under it (workers, their JVMs) at once, as a
        lost pod does, and the worker processes it took from the idle workers of an earlier run
        (runtime.placement.idle_workers: not under it, its record lists them); the pids killed."""
        pids = tree_pids(self.process.pid)
        for path in (self.log_path.parent.parent / "runs").glob("*.supervisor.json"):
            record = read_record(path)
            if record is not None and record.pid == self.process.pid:
                pids += [pid for entry in (*record.processes.values(), *record.standbys.values()) if entry.alive()
                         for pid in tree_pids(entry.pid) if pid not in pids]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=30)
        return pids


@dataclass
class InputFeeder:
    """Writes generated access-log records in transactions of ``chunk`` records every
    ``pause_s`` in a background thread, until ``total`` are written and ``until()`` (if given) is
    true; ``records`` is what was sent. One writer for the feeder's life (a new idempotent producer
    waits half a second before its first write is delivered). Each write becomes a micro-batch in
    every stage it reaches, and a batch costs Spark about the same CPU whatever its size: the
    tests and the demo write a larger chunk once a second rather than small ones more often."""

    bootstrap: str
    topic: str
    total: int
    chunk: int = 200
    pause_s: float = 0.5
    partitions: int = 4
    seed: int = 7
    per_minute: int = 250  # records per minute of event time (tidemark.examples.generator): a minute closes every 250
    malformed_every: int = 0  # every n-th record is truncated JSON (0: none)
    until: Callable[[], bool] | None = None
    records: list[bytes] = field(default_factory=list)
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> InputFeeder:
        self._thread = threading.Thread(target=self._run, name="input-feeder", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            source = generate(10**9, self.seed, per_minute=self.per_minute, malformed_every=self.malformed_every)
            with RecordWriter(self.bootstrap) as writer:
                while len(self.records) < self.total or (self.until is not None and not self.until()):
                    part = [next(source) for _ in range(self.chunk)]
                    writer.write(self.topic, part, self.partitions, chunk=self.chunk)
                    self.records.extend(part)
                    time.sleep(self.pause_s)
        except BaseException as exc:  # reported by join()
            self.error = exc

    def join(self, timeout_s: float = 300.0) -> list[bytes]:
        assert self._thread is not None
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError("input feeder still running")
        if self.error is not None:
            raise self.error
        return self.records


class LocalPipeline:
    def __init__(self, home: Path, bootstrap: str, *, topic_prefix: str = "tidemark",
                 services: tuple[str, ...] = DEFAULT_SERVICES, env: dict[str, str] | None = None,
                 api_token: str | None = None, standby: bool = True) -> None:
        """``standby``: whether jobs keep warm standby workers (``jobs run --no-standby`` when
        not; :mod:`tidemark.runtime.worker.standby`), unless ``start_job`` says otherwise."""
        self.home = Path(home)
        self.standby = standby
        self.bootstrap = bootstrap
        self.api_token = api_token
        self.env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000", **QUICK_START_ENV, **(env or {})}
        if api_token:
            self.env["TIDEMARK_API_TOKEN"] = api_token
        self.cluster = LocalCluster(self.home, bootstrap, topic_prefix=topic_prefix, env=self.env)
        self.service_names = services
        self.jobs: list[JobRun] = []
        self._client: CoordinatorClient | None = None

    def __enter__(self) -> LocalPipeline:
        archive = threading.Thread(target=self._build_class_archive, name="class-archive", daemon=True)
        archive.start()  # once per machine, while the services start
        try:
            self.cluster.start(list(self.service_names))
            self.cluster.wait_ready(timeout_s=120)
        except BaseException:
            self.cluster.stop()
            raise
        archive.join()
        return self

    def _build_class_archive(self) -> None:
        """The JVM class archive the stage workers map (:mod:`tidemark.spark.class_archive`),
        trained with the jars of the workers' Kafka source."""
        from tidemark.config.settings import TidemarkSettings
        from tidemark.spark.class_archive import ensure_archive
        from tidemark.spark.stage_source import stage_source

        jars = stage_source(TidemarkSettings(), self.bootstrap).session_conf().get("spark.jars", "")
        ensure_archive([jar for jar in jars.split(",") if jar], self.bootstrap)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        stop_processes([job.process for job in self.jobs], timeout_s=JOB_STOP_S)  # side by side
        for path in (self.home / "runs").glob("*.supervisor.json"):  # what a killed supervisor left
            record = read_record(path)
            if record is not None:
                stop_left_processes(record)
        self.cluster.stop()

    @property
    def coordinator_url(self) -> str:
        return self.cluster.services["coordinator"].url

    def client(self) -> CoordinatorClient:
        """One client while the coordinator keeps its address (its connections are reused)."""
        if self._client is None or self._client.url != self.coordinator_url:
            self._client = CoordinatorClient(self.coordinator_url, self.api_token, timeout_s=30)
        return self._client

    def completed_checkpoints(self, job_id: str) -> int:
        """Checkpoints and savepoints of ``job_id`` completed so far (0 while the coordinator is
        unreachable, e.g. restarting)."""
        try:
            jobs = self.client().jobs()["jobs"]
        except ApiError:
            return 0
        return sum(j["counts"]["completed"] for j in jobs if j["job"] == job_id)

    def create_topic(self, topic: str, partitions: int = 4) -> None:
        ensure_topics(AdminClient({"bootstrap.servers": self.bootstrap}), [TopicSpec(topic, partitions)])

    def restart_service(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Kill ``name`` (SIGKILL by default) and start it again on its port; wait until ready."""
        port = self.cluster.services[name].port
        self.cluster.stop_one(name, sig=sig)
        self.cluster.start_one(name, port=port)  # same address: running supervisors keep calling it
        self.cluster.wait_ready(timeout_s=120, names=[name])

    def command_env(self) -> dict[str, str]:
        """The environment of a ``tidemark`` command run against this pipeline (a job's, a CLI's)."""
        env = {**os.environ, **self.cluster.services["coordinator"].env, **self.env,
               "TIDEMARK_COORDINATOR_URL": self.coordinator_url}
        env.pop("TIDEMARK_HTTP_PORT", None)  # a service's port: the job's processes take free ones
        return env

    def start_job(self, reference: str, job_args: dict[str, Any] | None = None, *,
                  faults: tuple[str, ...] = (), parallelism: int | None = None,
                  from_savepoint: str | None = None, from_checkpoint: int | None = None,
                  fresh: bool = False, force: bool = False, allow_non_restored_state: bool = False,
                  standby: bool | None = None, max_restarts: int = 10, env: dict[str, str] | None = None,
                  fused: bool | None = None) -> JobRun:
        """Start ``tidemark jobs run`` (``fused``: ``--fused-workers`` or ``--no-fused-workers``, None: the
        command's default); ``env`` is applied last (e.g. ``TIDEMARK_HTTP_PORT`` to serve the
        supervisor's and the stages' metrics on fixed ports, which the job does not get otherwise)."""
        command = [sys.executable, "-m", "tidemark.cli", "jobs", "run", reference,
                   "--job-args", json.dumps(job_args or {}), "--max-restarts", str(max_restarts)]
        for fault in faults:
            command += ["--fault", fault]
        if parallelism is not None:
            command += ["--parallelism", str(parallelism)]
        command += StartRequest(from_checkpoint, from_savepoint, fresh, force,
                                allow_non_restored_state=allow_non_restored_state).command_line()
        command += [] if (self.standby if standby is None else standby) else ["--no-standby"]
        command += [] if fused is None else ["--fused-workers" if fused else "--no-fused-workers"]
        child_env = {**self.command_env(), **(env or {})}
        logs = self.home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"job-{len(self.jobs)}.log"
        with open(log_path, "ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=child_env, preexec_fn=die_with_parent)
        run = JobRun(process, log_path)
        self.jobs.append(run)
        return run


def stage_logs(home: Path) -> dict[str, str]:
    """Every stage worker log under ``home/runs``, by file name."""
    return {p.name: p.read_text(errors="replace") for p in sorted((home / "runs").glob("*/*.log"))}


def json_events(log_text: str) -> Iterator[dict[str, Any]]:
    """The JSON log events in a process's log (other lines, e.g. Spark's, are skipped)."""
    for line in log_text.splitlines():
        if line.startswith("{"):
            try:
                yield json.loads(line)
            except ValueError:
                continue


def acked_checkpoints(log_text: str) -> list[dict[str, Any]]:
    """The ``checkpoint acked`` events of a stage worker log."""
    return [e for e in json_events(log_text) if e.get("event") == "checkpoint acked"]


__all__ = ["InputFeeder", "JobRun", "LocalPipeline", "acked_checkpoints", "stage_logs", "wait_for"]
