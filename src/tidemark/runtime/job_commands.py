"""``tidemark jobs run`` (the supervisor), ``tidemark jobs worker`` (one stage) and ``tidemark jobs standby``
(a warm stage worker waiting for the next attempt), both started by the supervisor."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn, Optional

import typer

from tidemark.exit_codes import EXIT_CONFIG, EXIT_REFUSED, EXIT_UNREACHABLE, EXIT_USAGE
from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.kafka.clients import base_config
from tidemark.kafka.reachability import BrokerUnreachable, require_broker
from tidemark.admin import DEFAULT_URL
from tidemark.runtime.job.faults import POINTS
from tidemark.chassis.logs import configure_logging
from tidemark.types import Epoch

# Each command imports what only it needs (the supervisor, Spark, the HTTP client) when it runs:
# every Tidemark process starts through this CLI, and a service or a worker need not load the rest.

# missing input topic, a stage that cannot run (runtime.job.start_errors); the job's state is FAILED
JobRef = typer.Argument(..., help="The job: 'package.module:attribute' naming a JobSpec or a function returning one.")
ArgsOption = typer.Option("{}", "--job-args", help="JSON object of keyword arguments for a job function.")


def _settings(component: str) -> TidemarkSettings:
    try:
        settings = load_settings(TidemarkSettings)
    except ConfigurationError as exc:
        print(f"tidemark {component}: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None
    configure_logging(settings.log_level, service=component)
    return settings


@contextlib.contextmanager
def _configuration_errors_in_one_line(command: str) -> Iterator[None]:
    """A configuration error found while the command runs (a setting read late, e.g. the Kafka
    address a worker's Spark source resolves): one line and exit 78, as at start, not a traceback."""
    try:
        yield
    except ConfigurationError as exc:
        print(f"tidemark {command}: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None


def _require_kafka(settings: TidemarkSettings, command: str) -> None:
    """One line and exit 69 when Kafka cannot be reached at all (:mod:`tidemark.kafka.reachability`)."""
    try:
        require_broker(base_config(settings))
    except ConfigurationError as exc:
        print(f"tidemark {command}: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG) from None
    except BrokerUnreachable as exc:
        print(exc.one_line(command), file=sys.stderr)
        raise typer.Exit(EXIT_UNREACHABLE) from None


def _usage_error(command: str, message: str) -> NoReturn:
    """One line on stderr, exit status 2 (no usage block, no traceback)."""
    print(f"tidemark {command}: {message}", file=sys.stderr)
    raise typer.Exit(EXIT_USAGE)


def _job_args(text: str, command: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        _usage_error(command, f"--job-args: expected a JSON object, e.g. '{{\"parallelism\": 2}}': {exc}")
    if not isinstance(value, dict):
        _usage_error(command, f"--job-args: expected a JSON object, got {text!r}")
    return value


def run(
    job: str = JobRef,
    job_args: str = ArgsOption,
    parallelism: Optional[int] = typer.Option(None, "--parallelism", min=1, help="Tasks per stage (default: the job's)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Worker processes per stage, each owning a "
                                          "share of its tasks (default: the job's; a stage's own setting wins; at "
                                          "most the parallelism)."),
    from_checkpoint: Optional[int] = typer.Option(None, "--from-checkpoint", min=1,
                                                  help="Start from this retained checkpoint or savepoint id "
                                                       "(unless the job has newer state; see --force)."),
    from_savepoint: Optional[str] = typer.Option(None, "--from-savepoint",
                                                 help="Start from this _metadata path in checkpoint storage "
                                                      "(unless the job has newer state; see --force)."),
    fresh: bool = typer.Option(False, "--fresh", help="Start with empty state, reading the input from the "
                               "beginning (default: resume the job's newest retained checkpoint or savepoint)."),
    force: bool = typer.Option(False, "--force", help="Start as asked even when the job's output already holds "
                               "committed results (an empty start) or the job has state newer than --from-*."),
    start_id: Optional[str] = typer.Option(None, "--start-id", help="With --fresh: names this deployment (e.g. a "
                                           "hash of the job's definition). The first start with a start id starts "
                                           "empty and records it in checkpoint storage; a start with the recorded "
                                           "start id (a restart) resumes the state retained since."),
    allow_non_restored_state: bool = typer.Option(
        False, "--allow-non-restored-state", help="Restore a checkpoint or savepoint that holds state no stage of "
        "the job claims (a stage renamed or removed since), dropping that state; without it such a start is "
        "refused (exit 3), naming the state."),
    max_restarts: int = typer.Option(10, "--max-restarts", min=0, help="Failovers before giving up."),
    standby: bool = typer.Option(True, "--standby/--no-standby", help="Keep one warm worker per stage (its Spark "
                                 "session started) to take over the next attempt: recovery in seconds, for one "
                                 "more JVM per stage."),
    worker_hosts: bool = typer.Option(False, "--worker-hosts", help="Run no worker process here: place worker w "
                                      "of each stage on the worker host '<stage>/<w>' (`tidemark jobs host`, e.g. "
                                      "one pod each) and follow them over Kafka."),
    fused_workers: bool = typer.Option(
        True, "--fused-workers/--no-fused-workers", help="Run the exchange reader of a stage in its workers' "
        "processes (one process and SparkSession per worker instead of two; the records of a worker's own key "
        "groups skip the exchange), local workers and worker hosts alike."),
    generation: Optional[int] = typer.Option(None, "--generation", min=0, help="The deployment generation of "
                                             "this start (the chart passes its release revision): a job suspended "
                                             "for a newer generation (`savepoint trigger --stop --generation`) is "
                                             "not resumed; this start waits until it is stopped."),
    fault: list[str] = typer.Option([], "--fault", help="Testing: 'attempt@stage@point[:n]' kills a worker "
                                    f"with SIGKILL; points: {', '.join(sorted(POINTS))}."),
    url: str = typer.Option(DEFAULT_URL, "--url", envvar="TIDEMARK_COORDINATOR_URL", help="Coordinator HTTP address."),
    token: Optional[str] = typer.Option(None, "--token", envvar="TIDEMARK_API_TOKEN", show_default=False),
) -> None:
    """Run a job: PySpark workers for each stage, checkpointed by the coordinator, restored on failure."""
    from tidemark.admin.client import CoordinatorClient
    from tidemark.api import JobSpecError, load_job
    from tidemark.runtime.supervisor.attempt_planner import FaultPlan, RunOptions, StartRefused
    from tidemark.runtime.supervisor.supervisor import JobSupervisor
    from tidemark.start_request import StartRequest, StartRuleError, command_line_option

    try:
        start = StartRequest.of(spell=command_line_option, from_checkpoint=from_checkpoint,
                                from_savepoint=from_savepoint, fresh=fresh, force=force, start_id=start_id,
                                allow_non_restored_state=allow_non_restored_state)
    except StartRuleError as exc:
        _usage_error("jobs run", str(exc))
    fused = fused_workers
    args = _job_args(job_args, "jobs run")
    try:
        load_job(job, args)
    except (JobSpecError, ValueError) as exc:  # ValueError: what the job function raises on these args
        _usage_error("jobs run", str(exc))
    try:
        faults = tuple(FaultPlan.parse(f) for f in fault)
    except ValueError as exc:
        _usage_error("jobs run", f"--fault: {exc}")
    settings = _settings("supervisor")
    options = RunOptions(job, args, parallelism, start, max_restarts, faults, standby=standby, workers=workers,
                         worker_hosts=worker_hosts, fused=fused, generation=generation)
    _require_kafka(settings, "jobs run")
    try:
        supervisor = JobSupervisor(settings, options, CoordinatorClient(url, token))
        code = supervisor.run()
    except StartRefused as exc:
        print(f"tidemark jobs run: {exc}", file=sys.stderr)
        raise typer.Exit(EXIT_REFUSED) from None
    if supervisor.gave_up:
        print(f"tidemark jobs run: {supervisor.gave_up}", file=sys.stderr)
    raise typer.Exit(code)


ControlDirOption = typer.Option(None, "--control-dir", help="Where the process's control FIFO goes, for a "
                                "restarted supervisor to adopt it (tidemark.runtime.supervisor.adoption); unset: it is not adopted.")


def worker(
    job: str = JobRef,
    stage: str = typer.Option(..., "--stage"),
    epoch: int = typer.Option(..., "--epoch", min=1),
    parallelism: int = typer.Option(..., "--parallelism", min=1),
    run_dir: Path = typer.Option(..., "--run-dir"),
    restore: Optional[str] = typer.Option(None, "--restore"),
    job_args: str = ArgsOption,
    workers: str = typer.Option("{}", "--workers", help="Worker processes of each stage, a JSON object."),
    worker_index: int = typer.Option(0, "--worker", min=0, help="Which of its stage's workers this one is."),
    fused: Optional[str] = typer.Option(None, "--fused", help="A stage the worker runs beside its own (its "
                                        "exchange reader), as the same worker of it."),
    control_dir: Optional[Path] = ControlDirOption,
) -> None:
    """Run one stage of a job, or one worker's share of it, then each attempt the supervisor hands
    it after releasing it (the supervisor starts these)."""
    from tidemark.runtime.job.attempt import Attempt
    from tidemark.runtime.worker.process import StageProcess, SupervisorLines

    settings = _settings("worker")
    attempt = Attempt(job, stage, Epoch(epoch), parallelism, run_dir, _job_args(job_args, "jobs worker"), restore,
                      {str(k): int(v) for k, v in json.loads(workers).items()}, worker_index, fused)
    lines = SupervisorLines(control_dir=control_dir, adoption_window_s=settings.adoption_window_s)
    lines.start()
    with _configuration_errors_in_one_line("jobs worker"):
        code = StageProcess(settings, lines).run(attempt)
    raise typer.Exit(code)


def standby(
    stage: str = typer.Option(..., "--stage"),
    control_dir: Optional[Path] = ControlDirOption,
    idle_order: Optional[str] = typer.Option(None, "--idle-order", help="Go idle once warm, under this order "
                                             "(JSON; tidemark jobs warm-workers starts these)."),
    session: bool = typer.Option(True, "--session/--no-session", help="Start and warm a SparkSession (a stage "
                                 "that reads only channels needs none)."),
) -> None:
    """Wait, warm, to take over a stage's next attempt (the supervisor starts these)."""
    from tidemark.runtime.placement.idle_workers import IdleOrder
    from tidemark.runtime.worker.standby import run_standby

    settings = _settings("worker")
    order = None if idle_order is None else IdleOrder.from_text(idle_order)
    if order is not None and control_dir is None:
        _usage_error("jobs standby", "--idle-order needs --control-dir")
    with _configuration_errors_in_one_line("jobs standby"):
        code = run_standby(settings, stage, control_dir, order, session=session)
    raise typer.Exit(code)


def warm_workers(
    count: int = typer.Option(1, "--count", min=1, max=64, help="How many worker processes to start."),
    keep_s: Optional[float] = typer.Option(None, "--keep-s", min=1, max=3600, help="How long each waits for a "
                                           "job before it exits (default: the setting idle_workers.keep_s)."),
    wait_s: float = typer.Option(180.0, "--wait-s", min=1, help="How long to wait for them to be warm."),
) -> None:
    """Start worker processes whose SparkSession is started and warm, waiting as idle workers for
    the next jobs on this machine, so that even a job's first start needs no JVM start
    (needs idle_workers.dir, TIDEMARK_IDLE_WORKERS__DIR; the jobs take them when their workers
    would start the same session)."""
    import dataclasses

    from tidemark.runtime.placement.idle_workers import IdleWorkers, WarmWorkersFailed, idle_order, start_warm_workers

    settings = _settings("warm-workers")
    if settings.idle_workers.dir is None:
        print("tidemark jobs warm-workers: idle workers are off: set idle_workers.dir "
              "(TIDEMARK_IDLE_WORKERS__DIR), the same for the jobs that are to take them", file=sys.stderr)
        raise typer.Exit(EXIT_CONFIG)
    if count > settings.idle_workers.max:
        _usage_error("jobs warm-workers", f"--count {count}: at most idle_workers.max "
                                          f"({settings.idle_workers.max}) idle workers are kept")
    with _configuration_errors_in_one_line("jobs warm-workers"):  # the fingerprint resolves the Kafka source
        order = idle_order(settings)
    assert order is not None
    if keep_s is not None:
        order = dataclasses.replace(order, keep_s=keep_s)
    try:
        pids = start_warm_workers(order, count, wait_s, lambda warm: print(
            f"tidemark jobs warm-workers: {warm}/{count} warm", file=sys.stderr, flush=True))
    except WarmWorkersFailed as exc:
        print(f"tidemark jobs warm-workers: {exc}; their output is in {Path(order.dir) / 'logs'}", file=sys.stderr)
        raise typer.Exit(1) from None
    waiting = len(IdleWorkers(Path(order.dir)).waiting(order.fingerprint))
    print(f"tidemark jobs warm-workers: {count} worker process(es) warm in {order.dir} (pids "
          f"{', '.join(map(str, pids))}; {waiting} idle in all), each waiting {order.keep_s:g} s for a job")


def host(
    job: str = JobRef,
    job_args: str = ArgsOption,
    stage: Optional[str] = typer.Option(None, "--stage", help="The job's stage this host runs workers of."),
    stage_index: Optional[int] = typer.Option(None, "--stage-index", min=0, help="The same, by its place in the "
                                              "job (0 = first stage)."),
    worker_index: int = typer.Option(..., "--worker", min=0, envvar="TIDEMARK_WORKER_INDEX",
                                     help="Which of the stage's workers this host runs (a StatefulSet pod's index)."),
) -> None:
    """Run the worker processes a job's supervisor (`jobs run --worker-hosts`) places on worker host <stage>/<worker>."""
    from tidemark.api import JobSpecError, load_job
    from tidemark.runtime.placement.worker_host import WorkerHost

    if (stage is None) == (stage_index is None):
        _usage_error("jobs host", "give --stage or --stage-index, one of them")
    args = _job_args(job_args, "jobs host")
    try:
        spec = load_job(job, args)
    except (JobSpecError, ValueError) as exc:
        _usage_error("jobs host", str(exc))
    names = [s.name for s in spec.stages]
    if stage_index is not None:
        if stage_index >= len(names):
            _usage_error("jobs host", f"--stage-index {stage_index}: job {spec.job_id} has {len(names)} stage(s): "
                                      f"{', '.join(names)}")
        stage = names[stage_index]
    if stage not in names:
        _usage_error("jobs host", f"--stage {stage}: job {spec.job_id} has the stages {', '.join(names)}")
    settings = _settings("worker-host")
    _require_kafka(settings, "jobs host")
    raise typer.Exit(WorkerHost(settings, spec.job_id, str(stage), worker_index).run())


def install(jobs_app: typer.Typer) -> None:
    jobs_app.command("run")(run)
    jobs_app.command("host")(host)
    jobs_app.command("worker", hidden=True)(worker)
    jobs_app.command("standby", hidden=True)(standby)
    jobs_app.command("warm-workers")(warm_workers)
