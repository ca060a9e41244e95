"""The job supervisor: runs every stage of a job as worker processes and restores them on failure.

Each stage runs as ``W`` worker processes owning blocks of its tasks (:mod:`tidemark.runtime.job.ownership`;
a source stage with ``W > 1`` gets an exchange reader, :mod:`tidemark.runtime.job.physical_plan`), named
``<stage>`` with one worker and ``<stage>.w<n>`` otherwise.

Lifecycle: ``JobSupervisor(settings, options).run()`` blocks until the job finishes or is stopped,
writing a heartbeat on the heartbeats topic every second from its start to its end
(:mod:`tidemark.runtime.supervisor.heartbeat`; the coordinator reports a job whose supervisor fell silent
as FAILED):

0. a start of a deployment generation older than the one the job is suspended for waits instead
   of resuming it (:mod:`tidemark.runtime.supervisor.suspension`);
1. choose the first attempt's restore source (Flink's operator's upgrade modes;
   :mod:`tidemark.runtime.supervisor.attempt_planner`, which also chooses every later attempt's);
2. start every worker process through the worker pool (:mod:`tidemark.runtime.placement.pool`: as
   children here, each handed to its warm standby where one waits, or on worker hosts with
   ``--worker-hosts``), wait until each has restored and started its query;
3. register the attempt (``JobRegistration``: every task, the source tasks, each task's worker,
   the mode) on the
   control topic, so the coordinator starts triggering checkpoints (in changelog mode the
   attempt is first announced without tasks, so the changelog service creates the operators'
   changelog topics before the workers need them);
4. watch (:mod:`tidemark.runtime.supervisor.attempt_watch`): a worker that dies, or an ``AttemptFailed`` for the attempt on the control topic (the
   coordinator's checkpoint failure policy), fails the whole attempt (global failover, as Flink's
   full restart strategy): the others are released (each ends the attempt in place and keeps its
   started SparkSession, :mod:`tidemark.runtime.worker.process`), and the next attempt restores
   every stage from the newest retained checkpoint or savepoint *of this run* via the coordinator
   (up to ``max_restarts``), in the released processes, the failed one's in its stage's warm
   standby or a new process. A ``RestoreCommand`` of a newer epoch (the restore API called by an
   operator) replaces the attempt the same way with the attempt it names (not counted as a
   restart). Once every stage of the attempt processes records (or 30 s after it registered),
   the pool starts one warm standby per stage for the next attempt (``RunOptions.standby``);
5. when every worker exits 0 (a stop-with-savepoint completed) the attempt is registered as
   finished and ``run`` returns 0 (after waiting to be stopped when the stop suspended the job for
   a newer deployment generation: :mod:`tidemark.runtime.supervisor.suspension`). SIGTERM/SIGINT stop the workers and return 143/130.

A SIGKILLed supervisor's local workers run on: the next supervisor of the same command adopts
its running attempt instead of steps 1-3 (:mod:`tidemark.runtime.supervisor.adoption`).

With ``TIDEMARK_HTTP_PORT`` set (a deployment), the supervisor serves ``/livez``, ``/readyz``
(an attempt is registered and running) and ``/metrics`` on it, and worker process ``i`` (in job
order) serves its metrics on that port + 1 + i; otherwise the workers get free ports. Its
``/targets`` lists the metrics ports of the worker processes running now, for Prometheus's HTTP
service discovery (:mod:`tidemark.runtime.job.health`; empty with ``--worker-hosts``: each host
lists its own).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tidemark.checkpoint.job_state import AttemptOutcome
from tidemark.checkpoint.restore_planner import plan_assignments
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.metadata import partition_counts
from tidemark.kafka.outage import PATIENCE_S, BrokerWatch, broker_wait
from tidemark.kafka.topics import TopicNames
from tidemark.admin.client import CoordinatorClient
from tidemark.maven import MavenFetchError
from tidemark.processes import free_port, process_start_time
from tidemark.protocol.messages import JobRegistration
from tidemark.runtime.supervisor.adoption import (
    SupervisorRecord,
    adoption_refusal,
    read_record,
    record_path,
    stop_left_processes,
    write_record,
)
from tidemark.api import JobSpec, load_job
from tidemark.runtime.supervisor.attempt_planner import AttemptPlanner, AttemptState, RunOptions, StartRefused
from tidemark.runtime.supervisor.attempt_watch import AttemptWatch
from tidemark.runtime.job.control import AttemptSignals, ControlPublisher
from tidemark.runtime.job.health import serve_health
from tidemark.runtime.supervisor.heartbeat import SupervisorHeartbeats
from tidemark.runtime.supervisor.suspension import held_at_end, held_at_start, wait_while
from tidemark.runtime.placement.hosted_workers import HostedWorkers
from tidemark.runtime.placement.idle_workers import idle_order
from tidemark.runtime.placement.local_workers import LocalWorkers
from tidemark.runtime.job.metrics import EPOCH, RESTARTS, RUNNING
from tidemark.runtime.job.ownership import worker_of
from tidemark.runtime.job.physical_plan import physical_job, reader_workers, workers_per_stage
from tidemark.runtime.job.start_errors import missing_topics_reason
from tidemark.runtime.placement.pool import Launch, WorkerPool
from tidemark.runtime.supervisor.launch_plan import plan_launches
from tidemark.chassis.logs import get_logger
from tidemark.storage import open_storage
from tidemark.types import Epoch

log = get_logger(__name__)
REPORT_PATIENCE_S = 10.0  # how long telling the coordinator how the job ended may wait for the broker


class JobSupervisor:
    def __init__(self, settings: TidemarkSettings, options: RunOptions, coordinator: CoordinatorClient) -> None:
        self.settings = settings
        self.options = options
        self.coordinator = coordinator
        self.spec: JobSpec = load_job(options.job_ref, options.job_args)  # as written; ``running`` as it runs
        self.running_spec: JobSpec = self.spec
        self._input_partitions: dict[str, int] = {}
        self.storage = open_storage(settings.resolved_storage_url)
        self.topics = TopicNames(settings.topic_prefix)
        self.run_dir = settings.home / "runs" / f"{self.spec.job_id}-{os.getpid()}"
        self.restarts = 0
        self.attempts: list[AttemptState] = []
        self.running = False
        self._stop_signal: int | None = None
        self._control: ControlPublisher | None = None  # created at the first registration
        self._watching: AttemptWatch | None = None  # created before the first attempt
        self.pool: WorkerPool = (HostedWorkers(settings, self.topics, self.spec.job_id) if options.worker_hosts else
                                 LocalWorkers(self.run_dir, adoptable=True, idle=idle_order(settings),
                                              idle_max=settings.idle_workers.max))
        self.record_path = record_path(settings.home, self.spec.job_id)
        self._registered_at_ms = 0  # when the running attempt registered (0: not yet)
        self.planner = AttemptPlanner(settings, options, coordinator, self.spec, self.storage)
        self.gave_up: str | None = None  # set when ``run`` returns 1: why, one line

    # ------------------------------------------------------------------ main loop

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        job = self.spec.job_id
        if self.settings.http_port:
            serve_health(self.settings.http_host, self.settings.http_port, lambda: self.running,
                         targets=self._metrics_ports)
        RESTARTS.labels(job)
        BrokerWatch(base_config(self.settings)).start()  # reports a broker outage; nothing here needs to wait
        adopted = self._adopt()
        if adopted is None and self.options.generation is not None and not self._wait_while(held_at_start):
            return 130 if self._stop_signal == signal.SIGINT else 143
        heartbeats = SupervisorHeartbeats(base_config(self.settings), self.topics, job,
                                          lambda: self.attempts[-1].epoch if self.attempts else 0).start()
        signals = AttemptSignals(base_config(self.settings), self.topics, job,
                                 from_ms=self._registered_at_ms if adopted else None)
        self._watching = AttemptWatch(job, self.pool, signals, self.options.ready_timeout_s,
                                      stopping=lambda: self._stop_signal is not None,
                                      standbys_started=lambda: self._write_record(self.attempts[-1]))
        try:
            return self._run_attempts(adopted)
        except StartRefused as exc:  # a restart will not fix it: the job is FAILED, with the reason
            self._report_ended(self.attempts[-1] if self.attempts else None, AttemptOutcome.FAILED, str(exc))
            raise
        finally:
            heartbeats.stop()
            self.pool.close()
            record = read_record(self.record_path)
            if record is not None and record.pid == os.getpid():
                self.record_path.unlink(missing_ok=True)

    def _metrics_ports(self) -> dict[str, int]:
        """The metrics ports of the worker processes running here now (``/targets``)."""
        pool = self.pool
        return pool.metrics_ports() if isinstance(pool, LocalWorkers) else {}

    # ------------------------------------------------------------------ adoption (runtime.supervisor.adoption)

    def _adopt(self) -> AttemptState | None:
        """The attempt a killed predecessor left running, adopted; None (its processes stopped)
        when there is none or it cannot be adopted."""
        record = read_record(self.record_path)
        if record is None or record.pid == os.getpid():
            return None
        refusal = adoption_refusal(record, _identity(self.options), worker_hosts=self.options.worker_hosts)
        if (refusal is None and isinstance(self.pool, LocalWorkers)
                and self.pool.adopt(record, standby=self.options.standby)):
            attempt = AttemptState(**record.attempt)
            self.run_dir = Path(record.run_dir)
            self.restarts = record.restarts
            self.planner.adopt(record.parallelism, AttemptState(**record.origin) if record.origin else None,
                               record.baseline)
            self._registered_at_ms = record.registered_at_ms
            self._write_record(attempt)  # this supervisor's now: its successor adopts from it
            log.info("adopted the running attempt of a killed supervisor", job=self.spec.job_id,
                     epoch=attempt.epoch, predecessor=record.pid, processes=sorted(record.processes))
            return attempt
        if refusal is None:
            refusal = "one of its processes could not be reached"
        if record.predecessor_alive():
            return None  # another supervisor runs the job: the start refuses below, touching nothing
        stopped = stop_left_processes(record)
        log.warning("the attempt a killed supervisor left is not adopted; its processes stopped",
                    job=self.spec.job_id, predecessor=record.pid, reason=refusal, stopped=stopped)
        return None

    def _write_record(self, attempt: AttemptState) -> None:
        """Rewrite what a successor adopts (only local workers are adopted)."""
        if not isinstance(self.pool, LocalWorkers):
            return
        processes, standbys = self.pool.records()
        origin = self.planner.origin
        record = SupervisorRecord(
            job=self.spec.job_id, pid=os.getpid(), start_time=process_start_time(os.getpid()) or 0,
            identity=_identity(self.options), run_dir=str(self.run_dir),
            attempt=asdict(attempt), origin=asdict(origin) if origin is not None else None,
            baseline=self.planner.baseline, parallelism=self.planner.parallelism, restarts=self.restarts,
            registered_at_ms=self._registered_at_ms, processes=processes, standbys=standbys)
        try:
            write_record(self.record_path, record)
        except OSError as exc:
            log.warning("the supervisor's record not written; a restarted supervisor will not adopt the attempt",
                        path=str(self.record_path), error=str(exc))

    def _run_attempts(self, adopted: AttemptState | None) -> int:
        """The attempt loop, from the ``adopted`` one or a first; each ending is registered with
        its outcome (checkpoint.job_state)."""
        job, watching = self.spec.job_id, self._watching
        assert watching is not None
        self._input_partitions = _input_partitions(self.settings, self.spec)
        if adopted is None:
            _prepare_source(self.settings, job)
        attempt = adopted or self.planner.first()
        while True:
            self.attempts.append(attempt)
            EPOCH.labels(job).set(attempt.epoch)
            watching.failure = watching.restore = None
            outcome = self._run_attempt(attempt, adopted=attempt is adopted)
            self.running = False
            RUNNING.labels(job).set(0)
            if outcome == "finished":
                self._register(attempt, finished=True, outcome=AttemptOutcome.FINISHED)
                log.info("job finished", job=self.spec.job_id, epoch=attempt.epoch)
                self._wait_while(held_at_end)
                return 0
            if outcome == "stopped":  # the coordinator is told before the workers stop: it triggers no more and
                name = "SIGINT" if self._stop_signal == signal.SIGINT else "SIGTERM"  # aborts the pending, uncounted
                in_place = isinstance(self.pool, LocalWorkers) and self.pool.idle is not None
                if in_place:  # workers going idle end the attempt in place first: a checkpoint's files they write
                    self.pool.kill(graceful=True)  # meanwhile land before the coordinator aborts it
                self._report_ended(attempt, AttemptOutcome.CANCELLED, f"cancelled: the supervisor got {name}")
                if not in_place:
                    self.pool.kill(graceful=True)
                return 130 if self._stop_signal == signal.SIGINT else 143
            if outcome == "not-retryable":
                raise StartRefused(watching.failure or "a stage cannot run")
            if outcome == "restored":
                command = watching.restore
                assert command is not None
                attempt = self.planner.operator_restore(attempt.index + 1, command)
                continue
            self.restarts += 1
            RESTARTS.labels(job).inc()
            if self.restarts > self.options.max_restarts:
                reason = f"gave up after {self.options.max_restarts} restart(s); last failure: {watching.failure}"
                log.error("too many restarts; giving up", job=self.spec.job_id, restarts=self.restarts,
                          reason=watching.failure)
                self._report_ended(attempt, AttemptOutcome.FAILED, reason)
                self.gave_up = reason
                return 1
            self._report_ended(attempt, AttemptOutcome.RESTARTING, watching.failure or "the attempt failed")
            attempt = self.planner.failover(attempt.index + 1, attempt.epoch)

    def _running_spec(self) -> JobSpec:
        """The job as this attempt runs it: its worker processes per stage at the attempt's
        parallelism, and the exchanges that needs (runtime.job.physical_plan)."""
        written, parallelism = self.spec, self.planner.parallelism
        workers = reader_workers(written, workers_per_stage(written, parallelism, self.options.workers),
                                 self._input_partitions, parallelism)
        return physical_job(written, workers, lambda stage: self.topics.exchange(written.job_id, stage))

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

    def _wait_while(self, held: Callable[[dict[str, Any] | None, int | None], str | None]) -> bool:
        """Wait while ``held`` keeps this run from starting or ending (runtime.supervisor.suspension);
        False when stopped first."""
        return wait_while(held, self.planner.job_document, self.options.generation,
                          stopping=lambda: self._stop_signal is not None)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signum

    def _run_attempt(self, attempt: AttemptState, *, adopted: bool = False) -> str:
        running = self.running_spec = self._running_spec()
        if adopted:  # launched, ready and registered by the predecessor
            outcome = None
        else:
            launches = self._launches(attempt)
            log.info("starting attempt", job=self.spec.job_id, attempt=attempt.index, epoch=attempt.epoch,
                     restore=attempt.restore_path, parallelism=self.planner.parallelism,
                     workers={s.name: s.workers for s in running.stages},
                     processes={launch.name: [lane.stage for lane in launch.assignment.attempt.lanes()]
                                for launch in launches})
            if self.spec.changelog:  # announce first: the changelog service creates the changelog topics
                self._register(attempt, finished=False, announce_only=True)
            self._registered_at_ms = 0
            self.pool.launch(launches, standby=self.options.standby)
            self._write_record(attempt)
            outcome = self._watching.wait_ready(attempt.epoch)  # type: ignore[union-attr]
            if outcome is None:
                self._registered_at_ms = now_ms()
                self._register(attempt, finished=False)
                self._write_record(attempt)
        if outcome is None:
            self.running = True
            RUNNING.labels(self.spec.job_id).set(1)
            outcome = self._watching.watch(attempt.epoch)  # type: ignore[union-attr]
        if outcome not in ("finished", "stopped"):  # (stopped: _run_attempts stops the processes)
            # the processes still alive end the attempt in place, for the next
            self.pool.release()
        return outcome

    def _launches(self, attempt: AttemptState) -> list[Launch]:
        """Every worker process of the attempt (:mod:`tidemark.runtime.supervisor.launch_plan`). With a
        fixed HTTP port (a deployment) and local workers, process i (in job order) serves its
        metrics on port + 1 + i."""
        http_port = self.settings.http_port

        def port(index: int) -> int | None:
            if self.options.worker_hosts:
                return None
            return http_port + 1 + index if http_port else free_port()

        return plan_launches(self.running_spec.stages, job_ref=self.options.job_ref, job_args=self.options.job_args,
                             epoch=attempt.epoch, attempt=attempt.index, parallelism=self.planner.parallelism,
                             run_dir=self.run_dir, restore_path=attempt.restore_path, faults=self.options.faults,
                             fused=self.options.fused, port=port)

    def _register(self, attempt: AttemptState, *, finished: bool, announce_only: bool = False,
                  outcome: AttemptOutcome | None = None, reason: str = "", patience_s: float = PATIENCE_S) -> None:
        """Register the attempt; ``announce_only`` registers it without tasks (nothing is
        triggered yet), so the changelog service can create the changelog topics first; a
        ``finished`` one carries how it ended (``outcome``, ``reason``)."""
        spec, parallelism = self.running_spec, self.planner.parallelism
        operators = tuple(s.operator_id for s in spec.stages)
        tasks = () if announce_only else plan_assignments(operators, parallelism, spec.max_parallelism)
        sources = tuple(t.task_id for t in tasks if spec.is_source(spec.stage(t.operator_id)))
        workers = tuple(worker_of(t.subtask_index, parallelism, spec.stage(t.operator_id).workers or 1) for t in tasks)
        registration = JobRegistration(spec.job_id, attempt.epoch, spec.mode, spec.max_parallelism, tasks,
                                       sources, now_ms(), finished,
                                       changelog_operators=operators if spec.changelog else (),
                                       outcome=outcome.value if outcome is not None else "", reason=reason,
                                       workers=workers if any(workers) else ())
        if self._control is None:
            self._control = ControlPublisher(base_config(self.settings), self.topics, spec.job_id)
        self._control.register(registration, patience_s=patience_s)
        log.info("attempt registered", job=spec.job_id, epoch=attempt.epoch, tasks=len(tasks), finished=finished,
                 outcome=registration.outcome or None)  # the reason is the one line the command prints


def _identity(options: RunOptions) -> dict[str, Any]:
    """What makes two supervisors' commands the same job run (a successor adopts only its own)."""
    identity = {"job_ref": options.job_ref, "job_args": options.job_args, "parallelism": options.parallelism,
                "workers": options.workers}
    if options.fused:  # only then: an unfused run's identity stays what its predecessors recorded
        identity["fused"] = True
    return json.loads(json.dumps(identity, sort_keys=True, default=str))


def _input_partitions(settings: TidemarkSettings, spec: JobSpec) -> dict[str, int]:
    """The partitions of the job's input topics; refuses the start when one is missing (before
    any worker starts)."""
    inputs = spec.input_topics()
    client = base_config(settings)  # an adopting supervisor may start while the broker is away: it waits
    found = broker_wait(client).call("input topics", lambda: partition_counts(client, inputs, timeout_s=10.0))
    missing = [t for t in inputs if t not in found]
    if missing:
        raise StartRefused(missing_topics_reason(missing))
    return dict(found)


def _prepare_source(settings: TidemarkSettings, job: str) -> None:
    """Fetch what the stages' source needs (Spark's Kafka connector, with Maven, the first time
    on a machine) once, before any worker starts; a fetch that fails refuses the start."""
    from tidemark.spark.stage_source import stage_source  # Spark's data sources and Arrow: not on an adoption's path

    try:
        source = stage_source(settings)
    except MavenFetchError as exc:
        log.error("Spark's Kafka connector could not be fetched", error=str(exc))  # Maven's output
        raise StartRefused(f"Spark's Kafka connector could not be fetched (spark.source: "
                           f"{settings.spark.source}): {str(exc).splitlines()[0]}") from None
    log.info("stage source ready", job=job, source=source.format)
