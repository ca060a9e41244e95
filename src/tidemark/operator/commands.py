"""The operator commands of the ``tidemark`` CLI, talking to the coordinator's HTTP API.

``install(app)`` adds ``jobs list``, ``checkpoints list|history``, ``savepoints list``,
``savepoint trigger`` and ``restore`` to the root Typer app. Every command takes ``--url``
(``TIDEMARK_COORDINATOR_URL``), ``--token`` (``TIDEMARK_API_TOKEN``) and ``--json`` (print the
API's JSON document instead of text). Exit status: 0 success, 1 the API refused or failed (the
message is on stderr), 2 bad command-line usage.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Optional

import typer

from tidemark.operator import render
from tidemark.operator.client import DEFAULT_URL, ApiError, CoordinatorClient

UrlOption = typer.Option(DEFAULT_URL, "--url", envvar="TIDEMARK_COORDINATOR_URL",
                         help="Coordinator HTTP address.")
TokenOption = typer.Option(None, "--token", envvar="TIDEMARK_API_TOKEN", show_default=False,
                           help="Bearer token of the coordinator API.")
JsonOption = typer.Option(False, "--json", help="Print the API's JSON document.")
JobArgument = typer.Argument(..., help="The job id.")

jobs_app = typer.Typer(help="Jobs the coordinator knows.", no_args_is_help=True)
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
    try:
        return CoordinatorClient(url, token)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--url") from None


def _call(action: Callable[[], Any]) -> Any:
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
    """Jobs with their epoch, counts and last completed checkpoint."""
    document = _call(_client(url, token).jobs)
    rows = [(j["job"], j["epoch"], j["counts"]["completed"], j["counts"]["failed"],
             (j["last_completed"] or {}).get("id"), "stopping" if j["stopping"] else "")
            for j in document["jobs"]]
    _emit(document, as_json, lambda _: render.table(
        ("JOB", "EPOCH", "COMPLETED", "FAILED", "LAST ID", "STATE"), rows))


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


@savepoints_app.command("list")
def savepoints_list(job: str = JobArgument, url: str = UrlOption,
                    token: Optional[str] = TokenOption, as_json: bool = JsonOption) -> None:
    """Retained savepoints of JOB, read from checkpoint storage."""
    document = _call(lambda: _client(url, token).savepoints(job))
    _emit(document, as_json, lambda d: render.retained_text(d, "savepoints"))


@savepoint_app.command("trigger")
def savepoint_trigger(
    job: str = JobArgument,
    stop: bool = typer.Option(False, "--stop", help="Stop the job with the savepoint."),
    target: Optional[str] = typer.Option(None, "--target", help="Relative target directory."),
    wait: bool = typer.Option(False, "--wait", help="Wait until it completes or fails."),
    timeout_s: float = typer.Option(300.0, "--timeout", min=0.1, help="Seconds --wait waits."),
    url: str = UrlOption, token: Optional[str] = TokenOption, as_json: bool = JsonOption,
) -> None:
    """Take a savepoint of JOB (and stop it with --stop); exit 1 if --wait sees it fail."""
    client = _client(url, token)
    document = _call(lambda: client.trigger_savepoint(job, stop=stop, target=target))
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
