"""The job supervisor: runs every stage of a job as worker processes and restores them on failure.

Lifecycle: ``JobSupervisor(settings, options).run()`` blocks until the job finishes or is stopped:

1. choose the attempt's epoch and restore source: a fresh run takes the coordinator's newest
   epoch + 1 and no state (or the checkpoint/savepoint the options name, through the
   coordinator's restore API, which issues the ``RestoreCommand`` and the epoch);
2. start one worker process per stage, wait until each has restored and started its query;
3. register the attempt (``JobRegistration``: every task, the source tasks, the mode) on the
   control topic, so the coordinator starts triggering checkpoints (in changelog mode the
   attempt is first announced without tasks, so the changelog service creates the operators'
   changelog topics before the workers need them);
4. watch: a worker that dies fails the whole attempt (global failover, as Flink's full restart
   strategy): the others are killed, and the next attempt restores every stage from the newest
   retained checkpoint or savepoint *of this run* via the coordinator (up to ``max_restarts``);
5. when every worker exits 0 (a stop-with-savepoint completed) the attempt is registered as
   finished and ``run`` returns 0. SIGTERM/SIGINT stop the workers and return 143/130.

With ``TIDEMARK_HTTP_PORT`` set (a deployment), the supervisor serves ``/livez``, ``/readyz``
(an attempt is registered and running) and ``/metrics`` on it, and stage ``i`` (in job order)
serves its metrics on that port + 1 + i; otherwise the stages get free ports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from tidemark.broker.embedded import _die_with_parent, free_port
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.topics import TopicNames
from tidemark.operator.catalog import list_retained
from tidemark.operator.client import ApiError, CoordinatorClient
from tidemark.protocol.messages import JobRegistration
from tidemark.runtime.api import JobSpec, load_job
from tidemark.runtime.control import ControlPublisher, now_ms
from tidemark.runtime.health import EPOCH, RESTARTS, RUNNING, serve_health
from tidemark.service.logs import get_logger
from tidemark.storage import open_storage
from tidemark.types import CheckpointId, Epoch

log = get_logger(__name__)


@dataclass(frozen=True)
class FaultPlan:
    """Kill stage ``stage`` of attempt ``attempt`` (0 = first) at ``point`` (see runtime.faults)."""

    attempt: int
    stage: str
    point: str

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        parts = text.split("@")
        if len(parts) != 3 or not parts[0].isdigit():
            raise ValueError(f"fault plan must be 'attempt@stage@point[:n]', got {text!r}")
        return cls(int(parts[0]), parts[1], parts[2])


@dataclass
class RunOptions:
    job_ref: str
    job_args: dict[str, Any] = field(default_factory=dict)
    parallelism: int | None = None
    restore_checkpoint: int | None = None
    restore_path: str | None = None
    max_restarts: int = 10
    faults: tuple[FaultPlan, ...] = ()
    ready_timeout_s: float = 240.0


@dataclass
class AttemptState:
    index: int
    epoch: Epoch
    restore_path: str | None
    restored_id: CheckpointId | None
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)


class JobSupervisor:
    def __init__(self, settings: TidemarkSettings, options: RunOptions, coordinator: CoordinatorClient) -> None:
        self.settings = settings
        self.options = options
        self.coordinator = coordinator
        self.spec: JobSpec = load_job(options.job_ref, options.job_args)
        self.parallelism = options.parallelism or self.spec.parallelism
        self.storage = open_storage(settings.resolved_storage_url)
        self.topics = TopicNames(settings.topic_prefix)
        self.run_dir = settings.home / "runs" / f"{self.spec.job_id}-{os.getpid()}"
        self.restarts = 0
        self.attempts: list[AttemptState] = []
        # with a fixed HTTP port (a deployment), stage i serves its metrics on port + 1 + i
        base = settings.http_port
        self.ports = [base + 1 + i if base else free_port() for i in range(len(self.spec.stages))]
        self.running = False
        self._stop_signal: int | None = None
        self._control: ControlPublisher | None = None  # created at the first registration
        self._baseline = self._newest_retained_id()

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        job = self.spec.job_id
        if self.settings.http_port:
            serve_health(self.settings.http_host, self.settings.http_port, lambda: self.running)
        RESTARTS.labels(job)
        attempt = self._first_attempt()
        while True:
            self.attempts.append(attempt)
            EPOCH.labels(job).set(attempt.epoch)
            outcome = self._run_attempt(attempt)
            self.running = False
            RUNNING.labels(job).set(0)
            if outcome == "finished":
                self._register(attempt, finished=True)
                log.info("job finished", job=self.spec.job_id, epoch=attempt.epoch)
                return 0
            if outcome == "stopped":
                return 130 if self._stop_signal == signal.SIGINT else 143
            self.restarts += 1
            RESTARTS.labels(job).inc()
            if self.restarts > self.options.max_restarts:
                log.error("too many restarts; giving up", job=self.spec.job_id, restarts=self.restarts)
                return 1
            attempt = self._failover_attempt(attempt.index + 1)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signum

    def _run_attempt(self, attempt: AttemptState) -> str:
        log.info("starting attempt", job=self.spec.job_id, attempt=attempt.index, epoch=attempt.epoch,
                 restore=attempt.restore_path, parallelism=self.parallelism)
        if self.spec.changelog:  # announce first: the changelog service creates the changelog topics
            self._register(attempt, finished=False, announce_only=True)
        for index, stage in enumerate(self.spec.stages):
            attempt.processes[stage.name] = self._spawn(attempt, stage.name, self.ports[index])
        outcome = self._wait_ready(attempt)
        if outcome is None:
            self._register(attempt, finished=False)
            self.running = True
            RUNNING.labels(self.spec.job_id).set(1)
            outcome = self._watch(attempt)
        if outcome != "finished":
            self._kill_all(attempt, graceful=outcome == "stopped")
        return outcome

    def _wait_ready(self, attempt: AttemptState) -> str | None:
        deadline = time.monotonic() + self.options.ready_timeout_s
        pending = set(attempt.processes)
        while pending:
            if self._stop_signal is not None:
                return "stopped"
            for name in list(pending):
                if attempt.processes[name].poll() is not None:
                    log.error("worker died while starting", stage=name, code=attempt.processes[name].returncode)
                    return "failed"
                if (self.run_dir / f"{name}.epoch-{attempt.epoch}.ready").exists():
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                log.error("workers not ready in time", stages=sorted(pending))
                return "failed"
            time.sleep(0.2)
        return None

    def _watch(self, attempt: AttemptState) -> str:
        finished: set[str] = set()
        while True:
            if self._stop_signal is not None:
                return "stopped"
            for name, process in attempt.processes.items():
                code = process.poll()
                if code is None or name in finished:
                    continue
                if code != 0:
                    log.error("worker failed", job=self.spec.job_id, stage=name, code=code, epoch=attempt.epoch)
                    return "failed"
                finished.add(name)
            if len(finished) == len(attempt.processes):
                return "finished"
            time.sleep(0.1)

    # ------------------------------------------------------------------ attempts

    def _first_attempt(self) -> AttemptState:
        if self.options.restore_checkpoint is not None or self.options.restore_path is not None:
            return self._restore(0, self.options.restore_checkpoint, self.options.restore_path)
        return AttemptState(0, Epoch(self._coordinator_epoch() + 1), None, None)

    def _failover_attempt(self, index: int) -> AttemptState:
        """Restore from the newest checkpoint of this run, else from where the run started."""
        newest = self._newest_retained_id()
        if newest > self._baseline:
            return self._restore(index, newest, None)
        first = self.attempts[0]
        if first.restore_path is not None:
            return self._restore(index, None, first.restore_path)
        log.warning("no checkpoint of this run yet; restarting from the start", job=self.spec.job_id)
        return AttemptState(index, Epoch(self._coordinator_epoch() + 1), None, None)

    def _restore(self, index: int, checkpoint_id: int | None, path: str | None) -> AttemptState:
        doc = self._call(lambda: self.coordinator.restore(self.spec.job_id, parallelism=self.parallelism,
                                                          checkpoint_id=checkpoint_id, savepoint_path=path))
        log.info("restore issued", job=self.spec.job_id, checkpoint=doc["checkpoint_id"], epoch=doc["epoch"],
                 path=doc["metadata_path"])
        return AttemptState(index, Epoch(doc["epoch"]), doc["metadata_path"], CheckpointId(doc["checkpoint_id"]))

    def _newest_retained_id(self) -> int:
        ids = [e.metadata.checkpoint_id for kind in (False, True)
               for e in list_retained(self.storage, self.spec.job_id, savepoints=kind).entries]
        return max(ids, default=0)

    def _coordinator_epoch(self) -> int:
        jobs = self._call(self.coordinator.jobs)["jobs"]
        return max((int(j.get("epoch") or 0) for j in jobs if j.get("job") == self.spec.job_id), default=0)

    def _call(self, fn: Any, timeout_s: float = 180.0) -> Any:
        """Call the coordinator, waiting while it is down or still replaying (a restart)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return fn()
            except ApiError as exc:
                if exc.status not in (None, 503) or time.monotonic() > deadline:
                    raise
                log.info("coordinator not available; retrying", error=exc.message)
                time.sleep(1.0)

    # ------------------------------------------------------------------ processes

    def _spawn(self, attempt: AttemptState, stage: str, port: int) -> subprocess.Popen[bytes]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "TIDEMARK_HTTP_PORT": str(port)}  # the worker's metrics
        env.pop("TIDEMARK_FAULT", None)
        for fault in self.options.faults:
            if fault.attempt == attempt.index and fault.stage == stage:
                env["TIDEMARK_FAULT"] = fault.point
        command = [sys.executable, "-m", "tidemark.cli", "jobs", "worker", self.options.job_ref,
                   "--stage", stage, "--epoch", str(attempt.epoch), "--parallelism", str(self.parallelism),
                   "--run-dir", str(self.run_dir), "--job-args", json.dumps(self.options.job_args)]
        if attempt.restore_path:
            command += ["--restore", attempt.restore_path]
        log_path = self.run_dir / f"{stage}.log"
        with open(log_path, "ab") as out:
            return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, preexec_fn=_die_with_parent)

    def _kill_all(self, attempt: AttemptState, *, graceful: bool) -> None:
        for process in attempt.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
        for process in attempt.processes.values():
            try:
                process.wait(timeout=10)  # within a pod's default 30 s grace period
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _register(self, attempt: AttemptState, *, finished: bool, announce_only: bool = False) -> None:
        """Register the attempt; ``announce_only`` registers it without tasks (nothing is
        triggered yet), so the changelog service can create the changelog topics first."""
        spec = self.spec
        operators = tuple(s.operator_id for s in spec.stages)
        tasks = () if announce_only else plan_assignments(operators, self.parallelism, spec.max_parallelism)
        sources = tuple(t.task_id for t in tasks if spec.upstream_of(spec.stage(t.operator_id)) is None)
        registration = JobRegistration(spec.job_id, attempt.epoch, spec.mode, spec.max_parallelism, tasks,
                                       sources, now_ms(), finished,
                                       changelog_operators=operators if spec.changelog else ())
        if self._control is None:
            self._control = ControlPublisher(base_config(self.settings), self.topics, spec.job_id)
        self._control.register(registration)
        log.info("attempt registered", job=spec.job_id, epoch=attempt.epoch, tasks=len(tasks), finished=finished)
