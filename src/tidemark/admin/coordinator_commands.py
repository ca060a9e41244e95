"""The operator commands of the ``tidemark`` CLI, talking to the coordinator's HTTP API.

``install(app)`` adds ``jobs list|submit|runs|cancel``, ``checkpoints list|history|discard``,
``savepoints list``, ``savepoint trigger`` and ``restore`` to the root Typer app (``jobs run``,
the job runtime in the foreground, is :mod:`tidemark.runtime.job_commands`); :func:`state_get` is
``tidemark state get``, installed with the other state commands (:mod:`tidemark.admin.state_commands`). Every command takes ``--url``
(``TIDEMARK_COORDINATOR_URL``), ``--token`` (``TIDEMARK_API_TOKEN``) and ``--json`` (print the
API's JSON document instead of text). Exit status: 0 success, 1 the API refused or failed (the
message is on stderr), 2 bad command-line usage.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Optional

import typer

from tidemark.admin import DEFAULT_URL, render
from tidemark.start_request import StartRequest, StartRuleError, command_line_option

if TYPE_CHECKING:
    from tidemark.admin.client import CoordinatorClient

UrlOption = typer.Option(DEFAULT_URL, "--url", envvar="TIDEMARK_COORDINATOR_URL",
                         help="Coordinator HTTP address.")
TokenOption = typer.Option(None, "--token", envvar="TIDEMARK_API_TOKEN", show_default=False,
                           help="Bearer token of the coordinator API.")
JsonOption = typer.Option(False, "--json", help="Print the API's JSON document.")
JobArgument = typer.Argument(..., help="The job id.")

jobs_app = typer.Typer(help="Jobs: list, run, and runs started through the coordinator.", no_args_is_help=True)
checkpoints_app = typer.Typer(help="Checkpoints of a job.", no_args_is_help=True)
savepoints_app = typer.Typer(help="Retained savepoints of a job.", no_args_is_help=True)
savepoint_app = typer.Typer(help="Take savepoints.", no_args_is_help=True)


def install(app: typer.Typer) -> None:
    """Add the operator commands to ``app``."""
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(checkpoints_app, name="checkpoints")
    app.add_typer(savepoints_app, name="savepoints")
    app.add_typer(savepoint_app, name="savepoint")
    app.command("restore")(restore)


def _client(url: str, token: str | None) -> CoordinatorClient:
    from tidemark.admin.client import CoordinatorClient  # the HTTP stack: only in a command that calls the API

    try:
        return CoordinatorClient(url, token)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--url") from None


def _call(action: Callable[[], Any]) -> Any:
    from tidemark.admin.client import ApiError

    try:
        return action()
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _emit(document: Any, as_json: bool, text: Callable[[Any], str]) -> None:
    typer.echo(json.dumps(document, indent=2, sort_keys=True) if as_json else text(document))


@jobs_app.command("list")
def jobs_list(url: str = UrlOption, token: Optional[str] = TokenOption,
              as_json: bool = JsonOption) -> None:
    """Jobs with their state (CREATED, RUNNING, RESTARTING, FINISHED, CANCELLED, FAILED) and why,
    epoch, checkpoint counts and last completed checkpoint."""
    document = _call(_client(url, token).jobs)
    _emit(document, as_json, render.jobs_text)


def _job_args_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"expected a JSON object, e.g. '{{\"job_id\": \"orders\"}}': {exc}",
                                 param_hint="--job-args") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(f"expected a JSON object, got {text!r}", param_hint="--job-args")
    return value


@jobs_app.command("submit")
def jobs_submit(
    reference: str = typer.Argument(..., help="A job of the coordinator's catalog, 'package.module:attribute'."),
    job_args: str = typer.Option("{}", "--job-args", help="JSON object of keyword arguments for the job function."),
    parallelism: Optional[int] = typer.Option(None, "--parallelism", min=1, help="Tasks per stage (default: the job's)."),
    from_checkpoint: Optional[int] = typer.Option(None, "--from-checkpoint", min=1,
                                                  help="Restore from this retained checkpoint or savepoint id."),
    from_savepoint: Optional[str] = typer.Option(None, "--from-savepoint",
                                                 help="Restore from this savepoint directory or _metadata path, "
                                                      "relative to checkpoint storage."),
    fresh: bool = typer.Option(False, "--fresh", help="Start with empty state (as 'tidemark jobs run --fresh'; "
                               "default: resume the job's newest retained checkpoint or savepoint)."),
    force: bool = typer.Option(False, "--force", help="Start as asked even over committed output or newer state "
                               "(as 'tidemark jobs run --force')."),
    allow_non_restored_state: bool = typer.Option(
        False, "--allow-non-restored-state", help="Restore state some of which no stage of the job claims, "
        "dropping that part (as 'tidemark jobs run --allow-non-restored-state')."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Run a job on the coordinator's machine (as 'tidemark jobs run' there); prints the run."""
    try:
        start = StartRequest.of(spell=command_line_option, from_checkpoint=from_checkpoint,
                                from_savepoint=from_savepoint, fresh=fresh, force=force,
                                allow_non_restored_state=allow_non_restored_state)
    except StartRuleError as exc:
        raise typer.BadParameter(str(exc)) from None
    args = _job_args_object(job_args)
    document = _call(lambda: _client(url, token).submit_run(reference, args=args, parallelism=parallelism,
                                                            start=start))
    _emit(document, as_json, render.run_text)


@jobs_app.command("runs")
def jobs_runs(
    run_id: Optional[str] = typer.Argument(None, help="Show only this run."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Runs the coordinator started: RUNNING, or EXITED(code)."""
    client = _client(url, token)
    if run_id is not None:
        _emit(_call(lambda: client.run(run_id)), as_json, render.run_text)
    else:
        _emit(_call(client.runs), as_json, render.runs_text)


@jobs_app.command("cancel")
def jobs_cancel(
    run_id: str = typer.Argument(..., help="The run id ('tidemark jobs runs' lists them)."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Stop a run: its supervisor gets SIGTERM, stops its workers and exits (EXITED(143))."""
    document = _call(lambda: _client(url, token).cancel_run(run_id))
    _emit(document, as_json, lambda d: f"cancel sent to run {d['run_id']} of job {d['job']} (pid {d['pid']})")


@checkpoints_app.command("list")
def checkpoints_list(job: str = JobArgument, url: str = UrlOption,
                     token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """Retained (restorable) checkpoints of JOB, read from checkpoint storage."""
    document = _call(lambda: _client(url, token).retained_checkpoints(job))
    _emit(document, as_json, lambda d: render.retained_text(d, "checkpoints"))


@checkpoints_app.command("history")
def checkpoints_history(job: str = JobArgument, url: str = UrlOption,
                        token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """Recent checkpoints and savepoints of JOB with status, durations and sizes."""
    document = _call(lambda: _client(url, token).history(job))
    _emit(document, as_json, render.history_text)


@checkpoints_app.command("discard")
def checkpoints_discard(job: str = JobArgument,
                        checkpoint_id: int = typer.Argument(..., min=1, help="The checkpoint or savepoint id."),
                        url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """Discard retained checkpoint CHECKPOINT_ID of JOB (a corrupted one), which must not be running:
    the checkpoint-store deletes the files only it uses; the next start restores the newest one left."""
    document = _call(lambda: _client(url, token).discard_checkpoint(job, checkpoint_id))
    _emit(document, as_json, lambda d: f"checkpoint {d['discarded']} of job {d['job']} discarded; newest "
                                       f"completed checkpoint now: {d['newest_completed'] or 'none'}")


@savepoints_app.command("list")
def savepoints_list(job: str = JobArgument, url: str = UrlOption,
                    token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """Retained savepoints of JOB, read from checkpoint storage."""
    document = _call(lambda: _client(url, token).savepoints(job))
    _emit(document, as_json, lambda d: render.retained_text(d, "savepoints"))


_ENDED_STATES = ("SUSPENDED", "FINISHED", "CANCELLED", "FAILED")


def _ended_job(client: CoordinatorClient, job: str) -> dict[str, Any] | None:
    """JOB's document when it has ended (nothing runs to take a savepoint of); None while it is
    created, running or restarting. A job the coordinator does not know is an error (exit 1)."""
    jobs = {j["job"]: j for j in _call(client.jobs)["jobs"]}
    if job not in jobs:
        typer.echo(f"error: the coordinator knows no job {job!r} (known: {', '.join(sorted(jobs)) or 'none'})",
                   err=True)
        raise typer.Exit(1)
    return jobs[job] if jobs[job]["state"] in _ENDED_STATES else None


@savepoint_app.command("trigger")
def savepoint_trigger(
    job: str = JobArgument,
    stop: bool = typer.Option(False, "--stop", help="Stop the job with the savepoint."),
    target: Optional[str] = typer.Option(None, "--target", help="Relative target directory."),
    wait: bool = typer.Option(False, "--wait", help="Wait until it completes or fails."),
    timeout_s: float = typer.Option(300.0, "--timeout", min=0.1, help="Seconds --wait waits."),
    if_running: bool = typer.Option(False, "--if-running",
                                    help="Exit 0 without a savepoint when the job has ended (SUSPENDED, "
                                         "FINISHED, CANCELLED, FAILED): the chart's pre-upgrade hook."),
    generation: Optional[int] = typer.Option(None, "--generation", min=0,
                                             help="With --stop: suspend the job for this deployment generation "
                                                  "(the chart's release revision): a start of an older generation "
                                                  "(`jobs run --generation`) waits instead of resuming it."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Take a savepoint of JOB (and stop it with --stop); exit 1 if --wait sees it fail."""
    client = _client(url, token)
    if if_running and (ended := _ended_job(client, job)) is not None:
        _emit(ended, as_json, lambda d: f"job {job} is {d['state']}: no savepoint taken; its last savepoint: "
                                        f"{(d['last_savepoint'] or {}).get('metadata_path') or 'none'}")
        return
    if generation is not None and not stop:
        raise typer.BadParameter("a savepoint suspends the job for a generation only with --stop",
                                 param_hint="--generation")
    document = _call(lambda: client.trigger_savepoint(job, stop=stop, target=target, generation=generation))
    if wait:
        try:
            document = _call(lambda: client.wait_for_savepoint(
                job, document["request_id"], timeout_s=timeout_s))
        except TimeoutError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
    _emit(document, as_json, render.savepoint_text)
    if wait and document["status"] != "COMPLETED":
        raise typer.Exit(1)


def restore(
    job: str = JobArgument,
    from_checkpoint: Optional[int] = typer.Option(None, "--from-checkpoint", min=1,
                                                  help="Id of a retained checkpoint or savepoint."),
    from_savepoint: Optional[str] = typer.Option(None, "--from-savepoint",
                                                 help="Savepoint directory or _metadata path, "
                                                      "relative to checkpoint storage."),
    parallelism: int = typer.Option(..., "--parallelism", min=1, help="New parallelism."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Restore JOB from a checkpoint or savepoint at a new parallelism."""
    if (from_checkpoint is None) == (from_savepoint is None):
        raise typer.BadParameter("give exactly one of --from-checkpoint and --from-savepoint")
    document = _call(lambda: _client(url, token).restore(
        job, parallelism=parallelism, checkpoint_id=from_checkpoint, savepoint_path=from_savepoint))
    _emit(document, as_json, render.restore_text)


class KeyType(str, enum.Enum):
    STR = "str"
    INT = "int"


def state_get(job: str = typer.Option(..., "--job", help="The job id."),
              stage: str = typer.Option(..., "--stage", help="The stage whose state is read."),
              state: str = typer.Option(..., "--state", help="The name of the keyed state."),
              key: str = typer.Option(..., "--key", help="The key."),
              key_type: KeyType = typer.Option(KeyType.STR, "--key-type",
                                               help="How the key is read: as the stage's key_by gives keys."),
              url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """The value of KEY in state STATE of STAGE of a running job, as JSON: the task's state after
    its last processed micro-batch (not necessarily in a completed checkpoint), answered by the
    worker owning the key. An unknown stage, state or key, or a job not running, is one line on
    stderr and exit status 1."""
    document = _call(lambda: _client(url, token).state_value(job, stage, state, key, key_type=key_type.value))
    _emit(document, as_json, lambda d: json.dumps(d["value"], sort_keys=True))
