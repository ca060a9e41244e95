"""The job supervisor: runs every stage of a job as worker processes and restores them on failure.

Lifecycle: ``JobSupervisor(settings, options).run()`` blocks until the job finishes or is stopped:

1. choose the first attempt's restore source (Flink's operator's upgrade modes; see
   :meth:`JobSupervisor._first_attempt`): by default the newest retained checkpoint or savepoint
   of the job (last state); the one the options name, unless the job already has newer state (a
   restart of a run that began there); nothing with ``fresh``, unless its ``start_id`` already
   started empty (a restart of that start resumes its state; :mod:`tidemark.runtime.fresh_start`).
   A start with empty state is refused (:class:`StartRefused`) when the job's output already
   holds committed results, unless ``force``. A restore goes through the coordinator's restore
   API, which issues the ``RestoreCommand`` and the epoch; an empty start takes the
   coordinator's newest epoch + 1;
2. start one worker process per stage, wait until each has restored and started its query;
3. register the attempt (``JobRegistration``: every task, the source tasks, the mode) on the
   control topic, so the coordinator starts triggering checkpoints (in changelog mode the
   attempt is first announced without tasks, so the changelog service creates the operators'
   changelog topics before the workers need them);
4. watch: a worker that dies, or an ``AttemptFailed`` for the attempt on the control topic (the
   coordinator's checkpoint failure policy), fails the whole attempt (global failover, as Flink's
   full restart strategy): the others are killed, and the next attempt restores every stage from
   the newest retained checkpoint or savepoint *of this run* via the coordinator (up to
   ``max_restarts``). A ``RestoreCommand`` of a newer epoch (the restore API called by an
   operator) replaces the attempt the same way with the attempt it names (not counted as a
   restart);
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

from tidemark.processes import die_with_parent, free_port
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.checkpoint_store.verification import CorruptCheckpoint, verify_checkpoint
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.checkpoint.job_state import AttemptOutcome
from tidemark.kafka.metadata import partition_counts
from tidemark.kafka.outage import PATIENCE_S, BrokerWatch
from tidemark.kafka.topics import TopicNames
from tidemark.checkpoint_store.catalog import RestoreSourceNotFound, UnusableRestoreSource, resolve_restore_source
from tidemark.operator.client import ApiError, CoordinatorClient
from tidemark.protocol.messages import AttemptFailed, JobRegistration, RestoreCommand
from tidemark.runtime.api import JobSpec, load_job
from tidemark.runtime.committed_output import committed_output, newest_committed_checkpoint
from tidemark.runtime.control import AttemptSignals, ControlPublisher
from tidemark.runtime.fresh_start import (FreshStart, UnreadableFreshStart, is_restart, read_fresh_start,
                                          record_fresh_start)
from tidemark.runtime.health import EPOCH, RESTARTS, RUNNING, serve_health
from tidemark.exit_codes import EXIT_CONFIG, EXIT_REFUSED
from tidemark.runtime.start_errors import failed_file, missing_topics_reason
from tidemark.runtime.restore_source import RestoreRefused, RestoreSource, choose_restore_source, restore_candidates
from tidemark.service.logs import get_logger
from tidemark.storage import open_storage
from tidemark.types import CheckpointId, Epoch

log = get_logger(__name__)
REPORT_PATIENCE_S = 10.0  # how long telling the coordinator how the job ended may wait for the broker


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


class StartRefused(Exception):
    """The job cannot start as asked; the message is one line for the operator."""


@dataclass
class RunOptions:
    """``restore_checkpoint``/``restore_path``: start there (unless the job has newer state);
    ``fresh``: start with empty state, unless ``start_id`` (only with ``fresh``) already did (then
    resume what that start retained); neither: the newest retained state (last state).
    ``force``: start as asked even over committed output or newer state."""

    job_ref: str
    job_args: dict[str, Any] = field(default_factory=dict)
    parallelism: int | None = None
    restore_checkpoint: int | None = None
    restore_path: str | None = None
    max_restarts: int = 10
    faults: tuple[FaultPlan, ...] = ()
    ready_timeout_s: float = 240.0
    fresh: bool = False
    force: bool = False
    start_id: str | None = None


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
        self._signals: AttemptSignals | None = None  # created before the first attempt
        self._restored_by_operator: RestoreCommand | None = None
        self._baseline = self._newest_retained_id()
        self._origin: AttemptState | None = None  # whose restore source a failover falls back to
        self._failure: str | None = None  # why the current attempt failed, one line
        self.gave_up: str | None = None  # set when ``run`` returns 1: why, one line

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        job = self.spec.job_id
        if self.settings.http_port:
            serve_health(self.settings.http_host, self.settings.http_port, lambda: self.running)
        RESTARTS.labels(job)
        BrokerWatch(base_config(self.settings)).start()  # reports a broker outage; nothing here needs to wait
        self._signals = AttemptSignals(base_config(self.settings), self.topics, job)
        try:
            return self._run_attempts()
        except StartRefused as exc:  # a restart will not fix it: the job is FAILED, with the reason
            self._report_ended(self.attempts[-1] if self.attempts else None, AttemptOutcome.FAILED, str(exc))
            raise

    def _run_attempts(self) -> int:
        """The attempt loop; each ending is registered with its outcome (checkpoint.job_state)."""
        job = self.spec.job_id
        self._check_inputs()
        attempt = self._origin = self._first_attempt()
        while True:
            self.attempts.append(attempt)
            EPOCH.labels(job).set(attempt.epoch)
            self._failure = None
            outcome = self._run_attempt(attempt)
            self.running = False
            RUNNING.labels(job).set(0)
            if outcome == "finished":
                self._register(attempt, finished=True, outcome=AttemptOutcome.FINISHED)
                log.info("job finished", job=self.spec.job_id, epoch=attempt.epoch)
                return 0
            if outcome == "stopped":
                name = "SIGINT" if self._stop_signal == signal.SIGINT else "SIGTERM"
                self._report_ended(attempt, AttemptOutcome.CANCELLED, f"cancelled: the supervisor got {name}")
                return 130 if self._stop_signal == signal.SIGINT else 143
            if outcome == "not-retryable":
                raise StartRefused(self._failure or "a stage cannot run")
            if outcome == "restored":
                attempt = self._origin = self._operator_restore_attempt(attempt.index + 1)
                continue
            self.restarts += 1
            RESTARTS.labels(job).inc()
            if self.restarts > self.options.max_restarts:
                reason = f"gave up after {self.options.max_restarts} restart(s); last failure: {self._failure}"
                log.error("too many restarts; giving up", job=self.spec.job_id, restarts=self.restarts,
                          reason=self._failure)
                self._report_ended(attempt, AttemptOutcome.FAILED, reason)
                self.gave_up = reason
                return 1
            self._report_ended(attempt, AttemptOutcome.RESTARTING, self._failure or "the attempt failed")
            attempt = self._failover_attempt(attempt.index + 1)

    def _check_inputs(self) -> None:
        """Refuse the start when an input topic of the job is missing (before any worker starts)."""
        inputs = sorted({t for stage in self.spec.stages if self.spec.upstream_of(stage) is None
                         for t in stage.inputs})
        found = partition_counts(base_config(self.settings), inputs, timeout_s=10.0)
        missing = [t for t in inputs if t not in found]
        if missing:
            raise StartRefused(missing_topics_reason(missing))

    def _report_ended(self, attempt: AttemptState | None, outcome: AttemptOutcome, reason: str) -> None:
        """Tell the coordinator how the attempt ended (its job state and reason); best effort,
        bounded in time: an unreachable broker or coordinator never holds up the exit."""
        try:
            if attempt is None:  # nothing started: the ended attempt takes the next epoch
                known = [j for j in self.coordinator.jobs()["jobs"] if j.get("job") == self.spec.job_id]
                if any(j.get("state") == "RUNNING" for j in known):
                    return  # another supervisor runs the job: its state is its own, not this refused start's
                epoch = max((int(j.get("epoch") or 0) for j in known), default=0)
                attempt = AttemptState(-1, Epoch(epoch + 1), None, None)
            self._register(attempt, finished=True, outcome=outcome, reason=reason, patience_s=REPORT_PATIENCE_S)
        except Exception as exc:
            log.warning("job state not reported to the coordinator", job=self.spec.job_id, outcome=outcome.value,
                        error=str(exc))

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
            signalled = self._control_signal(attempt)
            if signalled is not None:
                return signalled
            for name in list(pending):
                if attempt.processes[name].poll() is not None:
                    log.error("worker died while starting", stage=name, code=attempt.processes[name].returncode)
                    return self._stage_failed(attempt, name)
                if (self.run_dir / f"{name}.epoch-{attempt.epoch}.ready").exists():
                    pending.discard(name)
            if pending and time.monotonic() > deadline:
                log.error("workers not ready in time", stages=sorted(pending))
                self._failure = (f"stage(s) {', '.join(sorted(pending))} not ready within "
                                 f"{self.options.ready_timeout_s:g}s")
                return "failed"
            time.sleep(0.2)
        return None

    def _watch(self, attempt: AttemptState) -> str:
        finished: set[str] = set()
        while True:
            if self._stop_signal is not None:
                return "stopped"
            signalled = self._control_signal(attempt)
            if signalled is not None:
                return signalled
            for name, process in attempt.processes.items():
                code = process.poll()
                if code is None or name in finished:
                    continue
                if code != 0:
                    log.error("worker failed", job=self.spec.job_id, stage=name, code=code, epoch=attempt.epoch)
                    return self._stage_failed(attempt, name)
                finished.add(name)
            if len(finished) == len(attempt.processes):
                return "finished"
            time.sleep(0.1)

    def _control_signal(self, attempt: AttemptState) -> str | None:
        """``failed`` when the coordinator failed this attempt over, ``restored`` when a restore
        of a newer epoch was issued (the restore API), else None."""
        assert self._signals is not None
        for message in self._signals.poll():
            if isinstance(message, AttemptFailed) and message.epoch == attempt.epoch:
                log.error("attempt failed by the coordinator; failing over", job=self.spec.job_id,
                          epoch=attempt.epoch, reason=message.reason)
                self._failure = message.reason
                return "failed"
            if isinstance(message, RestoreCommand) and message.epoch > attempt.epoch:
                log.info("restore issued through the API; replacing the attempt", job=self.spec.job_id,
                         epoch=attempt.epoch, restore_epoch=message.epoch, checkpoint=message.checkpoint_id,
                         parallelism=message.parallelism)
                self._restored_by_operator = message
                return "restored"
        return None

    def _stage_failed(self, attempt: AttemptState, stage: str) -> str:
        """``not-retryable`` when the stage left a reason a restart will not fix
        (:mod:`tidemark.runtime.start_errors`), else ``failed``; the reason goes to ``_failure``."""
        code = attempt.processes[stage].returncode
        reason_file = failed_file(self.run_dir, stage, attempt.epoch)
        stage_log = self.run_dir / f"{stage}.log"
        if code == EXIT_REFUSED and reason_file.exists():
            self._failure = reason_file.read_text(encoding="utf-8").strip()
            return "not-retryable"
        if code == EXIT_CONFIG:
            self._failure = f"stage {stage}: invalid configuration (exit 78; its log: {stage_log})"
            return "not-retryable"
        self._failure = f"stage {stage} exited with code {code} (its log: {stage_log})"
        return "failed"

    # ------------------------------------------------------------------ attempts

    def _first_attempt(self) -> AttemptState:
        """Flink's operator's start semantics: ``fresh`` starts empty; a named checkpoint or
        savepoint is restored unless the job already has newer retained state (then this is a
        restart of a run that began there, e.g. a pod restarted with the same arguments, and
        the newest state is resumed: restoring the older one would commit its results again);
        otherwise the newest retained checkpoint or savepoint (last state)."""
        options, job = self.options, self.spec.job_id
        if options.fresh:
            return self._fresh_attempt()
        if options.restore_checkpoint is not None or options.restore_path is not None:
            requested = self._requested_id()
            if self._baseline > requested and not options.force:
                log.warning("the job has newer state than the requested restore source; resuming it",
                            job=job, requested=requested, newest=self._baseline)
                return self._resume_last_state()
            self._verify_requested()
            return self._restore(0, options.restore_checkpoint, options.restore_path)
        if self._baseline:
            log.info("resuming the job's last state", job=job, checkpoint=self._baseline)
            return self._resume_last_state()
        self._refuse_over_committed_output("a start without a retained checkpoint or savepoint")
        return self._empty_attempt(0)

    def _fresh_attempt(self) -> AttemptState:
        """``--fresh``: empty state, unless ``start_id`` already started empty (a restart of that
        deployment: resume the newest state retained since, never one from before it; with none
        yet, start empty again)."""
        start_id, job = self.options.start_id, self.spec.job_id
        if start_id is not None:
            try:
                recorded = read_fresh_start(self.storage, job)
            except UnreadableFreshStart as exc:
                raise StartRefused(str(exc)) from None
            if is_restart(recorded, start_id):
                assert recorded is not None
                source = self._choose_source(recorded.baseline, None)  # verified; fallback only within it
                if source.checkpoint_id is not None:
                    log.info("restart of a fresh start; resuming the job's last state", job=job, start_id=start_id,
                             checkpoint=source.checkpoint_id, fresh_start_baseline=recorded.baseline)
                    return self._restore(0, source.checkpoint_id, None)
                log.info("restart of a fresh start with no checkpoint of it; starting empty again", job=job,
                         start_id=start_id)
                self._refuse_over_committed_output("--fresh")
                return self._empty_attempt(0)
        self._refuse_over_committed_output("--fresh")
        if start_id is not None:
            record_fresh_start(self.storage, job, FreshStart(start_id, self._baseline, now_ms()))
            log.info("fresh start recorded", job=job, start_id=start_id, baseline=self._baseline)
        return self._empty_attempt(0)

    def _requested_id(self) -> int:
        options = self.options
        if options.restore_checkpoint is not None:
            return options.restore_checkpoint
        try:
            source = resolve_restore_source(self.storage, self.spec.job_id, None, options.restore_path)
        except (RestoreSourceNotFound, UnusableRestoreSource) as exc:
            raise StartRefused(str(exc)) from None
        return source.metadata.checkpoint_id

    def _refuse_over_committed_output(self, start: str) -> None:
        if self.options.force:
            return
        found = committed_output(base_config(self.settings), self.topics, self.spec)
        if found is not None:
            raise StartRefused(f"{start} would write results again: {found}; resume the job's state "
                               f"(no --fresh), or pass --force to start empty anyway")

    def _empty_attempt(self, index: int) -> AttemptState:
        return AttemptState(index, Epoch(self._coordinator_epoch() + 1), None, None)

    def _failover_attempt(self, index: int) -> AttemptState:
        """Restore from the newest checkpoint of this run, else from where the run started; a
        corrupted one stops the job or falls back (see :mod:`tidemark.runtime.restore_source`)."""
        assert self._origin is not None
        source = self._choose_source(self._baseline, self._origin.restore_path)
        if source.checkpoint_id is not None or source.path is not None:
            return self._restore(index, source.checkpoint_id, source.path)
        log.warning("no checkpoint of this run yet; restarting from the start", job=self.spec.job_id)
        return self._empty_attempt(index)

    def _resume_last_state(self) -> AttemptState:
        """The newest retained checkpoint or savepoint, verified first: a corrupted one refuses the
        start, or with ``TIDEMARK_RESTORE_FALLBACK`` an older one stands in when that keeps the output
        exactly once (the same rule as a failover; :mod:`tidemark.runtime.restore_source`)."""
        source = self._choose_source(0, None)
        if source.checkpoint_id is None:  # every candidate corrupted, and starting over is allowed
            log.warning("no whole checkpoint to resume; starting from the start", job=self.spec.job_id)
            return self._empty_attempt(0)
        return self._restore(0, source.checkpoint_id, None)

    def _choose_source(self, baseline: int, started_from: str | None) -> RestoreSource:
        try:
            return choose_restore_source(
                self.storage, self.spec, baseline=baseline, started_from=started_from,
                allow_fallback=self.settings.restore_fallback,
                committed_up_to=lambda: newest_committed_checkpoint(base_config(self.settings), self.topics, self.spec))
        except RestoreRefused as exc:
            log.error("restore refused", job=self.spec.job_id, error=str(exc))
            raise StartRefused(str(exc)) from None

    def _verify_requested(self) -> None:
        """The checkpoint or savepoint the options name must be whole (no fallback: it was named)."""
        options = self.options
        try:
            source = resolve_restore_source(self.storage, self.spec.job_id, options.restore_checkpoint,
                                            options.restore_path)
            verify_checkpoint(self.storage, source.path)
        except (RestoreSourceNotFound, UnusableRestoreSource, CorruptCheckpoint) as exc:
            raise StartRefused(str(exc)) from None

    def _operator_restore_attempt(self, index: int) -> AttemptState:
        """The attempt a restore issued through the API names: its epoch, source and parallelism.
        Later failovers fall back to it, not to where the run started."""
        command = self._restored_by_operator
        assert command is not None
        self._restored_by_operator = None
        self.parallelism = command.parallelism
        self._baseline = max(self._newest_retained_id(), command.checkpoint_id)
        return AttemptState(index, command.epoch, command.metadata_path, command.checkpoint_id)

    def _restore(self, index: int, checkpoint_id: int | None, path: str | None) -> AttemptState:
        doc = self._call(lambda: self.coordinator.restore(self.spec.job_id, parallelism=self.parallelism,
                                                          checkpoint_id=checkpoint_id, savepoint_path=path))
        log.info("restore issued", job=self.spec.job_id, checkpoint=doc["checkpoint_id"], epoch=doc["epoch"],
                 path=doc["metadata_path"])
        return AttemptState(index, Epoch(doc["epoch"]), doc["metadata_path"], CheckpointId(doc["checkpoint_id"]))

    def _newest_retained_id(self) -> int:
        """Counting checkpoints whose ``_metadata`` does not decode: never skip one silently."""
        return max((checkpoint_id for checkpoint_id, _ in restore_candidates(self.storage, self.spec, 0)), default=0)

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
                                    env=env, preexec_fn=die_with_parent)

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

    def _register(self, attempt: AttemptState, *, finished: bool, announce_only: bool = False,
                  outcome: AttemptOutcome | None = None, reason: str = "", patience_s: float = PATIENCE_S) -> None:
        """Register the attempt; ``announce_only`` registers it without tasks (nothing is
        triggered yet), so the changelog service can create the changelog topics first; a
        ``finished`` one carries how it ended (``outcome``, ``reason``)."""
        spec = self.spec
        operators = tuple(s.operator_id for s in spec.stages)
        tasks = () if announce_only else plan_assignments(operators, self.parallelism, spec.max_parallelism)
        sources = tuple(t.task_id for t in tasks if spec.upstream_of(spec.stage(t.operator_id)) is None)
        registration = JobRegistration(spec.job_id, attempt.epoch, spec.mode, spec.max_parallelism, tasks,
                                       sources, now_ms(), finished,
                                       changelog_operators=operators if spec.changelog else (),
                                       outcome=outcome.value if outcome is not None else "", reason=reason)
        if self._control is None:
            self._control = ControlPublisher(base_config(self.settings), self.topics, spec.job_id)
        self._control.register(registration, patience_s=patience_s)
        log.info("attempt registered", job=spec.job_id, epoch=attempt.epoch, tasks=len(tasks), finished=finished,
                 outcome=registration.outcome or None)  # the reason is the one line the command prints
