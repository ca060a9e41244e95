"""``tidemark jobs run`` (the supervisor) and ``tidemark jobs worker`` (one stage; started by it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.operator.client import DEFAULT_URL, CoordinatorClient
from tidemark.runtime.api import JobSpecError, load_job
from tidemark.runtime.faults import POINTS
from tidemark.runtime.supervisor import FaultPlan, JobSupervisor, RunOptions
from tidemark.service.logs import configure_logging
from tidemark.types import Epoch

EXIT_CONFIG = 78
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


def _job_args(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"expected a JSON object: {exc}", param_hint="--job-args") from None
    if not isinstance(value, dict):
        raise typer.BadParameter("expected a JSON object", param_hint="--job-args")
    return value


def run(
    job: str = JobRef,
    job_args: str = ArgsOption,
    parallelism: Optional[int] = typer.Option(None, "--parallelism", min=1, help="Tasks per stage (default: the job's)."),
    from_checkpoint: Optional[int] = typer.Option(None, "--from-checkpoint", min=1,
                                                  help="Restore from this retained checkpoint or savepoint id."),
    from_savepoint: Optional[str] = typer.Option(None, "--from-savepoint",
                                                 help="Restore from this _metadata path in checkpoint storage."),
    max_restarts: int = typer.Option(10, "--max-restarts", min=0, help="Failovers before giving up."),
    fault: list[str] = typer.Option([], "--fault", help="Testing: 'attempt@stage@point[:n]' kills a worker "
                                    f"with SIGKILL; points: {', '.join(sorted(POINTS))}."),
    url: str = typer.Option(DEFAULT_URL, "--url", envvar="TIDEMARK_COORDINATOR_URL", help="Coordinator HTTP address."),
    token: Optional[str] = typer.Option(None, "--token", envvar="TIDEMARK_API_TOKEN", show_default=False),
) -> None:
    """Run a job: one PySpark worker per stage, checkpointed by the coordinator, restored on failure."""
    if from_checkpoint is not None and from_savepoint is not None:
        raise typer.BadParameter("give --from-checkpoint or --from-savepoint, not both")
    args = _job_args(job_args)
    try:
        load_job(job, args)
        faults = tuple(FaultPlan.parse(f) for f in fault)
    except (JobSpecError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = _settings("supervisor")
    options = RunOptions(job, args, parallelism, from_checkpoint, from_savepoint, max_restarts, faults)
    raise typer.Exit(JobSupervisor(settings, options, CoordinatorClient(url, token)).run())


def worker(
    job: str = JobRef,
    stage: str = typer.Option(..., "--stage"),
    epoch: int = typer.Option(..., "--epoch", min=1),
    parallelism: int = typer.Option(..., "--parallelism", min=1),
    run_dir: Path = typer.Option(..., "--run-dir"),
    restore: Optional[str] = typer.Option(None, "--restore"),
    job_args: str = ArgsOption,
) -> None:
    """Run one stage of a job (the supervisor starts these)."""
    from tidemark.runtime.query import run_attempt
    from tidemark.runtime.worker import Attempt

    settings = _settings("worker")
    attempt = Attempt(job, stage, Epoch(epoch), parallelism, run_dir, _job_args(job_args), restore)
    raise typer.Exit(run_attempt(settings, attempt))


def install(jobs_app: typer.Typer) -> None:
    jobs_app.command("run")(run)
    jobs_app.command("worker", hidden=True)(worker)
