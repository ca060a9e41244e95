"""``tidemark state inspect|read``: a job's state in its retained checkpoints and savepoints; and
``tidemark state get``, a key's live value in a running job through the coordinator
(:func:`tidemark.admin.coordinator_commands.state_get`).

Thin: each command parses its options and calls :mod:`tidemark.state_processor`. Checkpoint
storage is ``--storage`` (default: the settings', ``TIDEMARK_CHECKPOINT_STORAGE_URL``, else the
home's ``checkpoints``). Exit status (:mod:`tidemark.exit_codes`): 0 done; 2 a wrong job, id,
path, stage, state or option, named in one line on stderr; 1 the state could not be read (a
corrupted file, the changelog out of reach).
"""

from __future__ import annotations

import enum
import json
import sys
from pathlib import Path
from typing import Optional

import typer

from tidemark.admin.kafka_connection import fail
from tidemark.admin.render import checkpoint_view_text
from tidemark.exit_codes import EXIT_FAILED, EXIT_USAGE

state_app = typer.Typer(help="Read a job's state from its retained checkpoints and savepoints, or a key's "
                        "value live from a running job (get).",
                        no_args_is_help=True)

JobArgument = typer.Argument(..., help="The job id.")
CheckpointOption = typer.Option(None, "--checkpoint", min=0, help="A retained checkpoint or savepoint id.")
SavepointOption = typer.Option(None, "--savepoint", help="A savepoint's directory or _metadata path, "
                               "relative to checkpoint storage.")
StorageOption = typer.Option(None, "--storage", show_default=False,
                             help="Checkpoint storage URL (default: the settings', TIDEMARK_CHECKPOINT_STORAGE_URL).")


class View(str, enum.Enum):
    state = "state"
    timers = "timers"
    operator_state = "operator_state"
    source_positions = "source_positions"


class Format(str, enum.Enum):
    jsonl = "jsonl"
    parquet = "parquet"


def install(app: typer.Typer) -> None:
    from tidemark.admin.coordinator_commands import state_get

    state_app.command("get")(state_get)
    app.add_typer(state_app, name="state")


def _storage_url(storage: str | None, command: str) -> str:
    if storage:
        return storage
    from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings

    try:
        return load_settings(TidemarkSettings).resolved_storage_url
    except ConfigurationError as exc:
        fail(command, str(exc), EXIT_USAGE)


def _reader(command: str, job: str, checkpoint: int | None, savepoint: str | None, storage: str | None):  # type: ignore[no-untyped-def]
    from tidemark.state_processor import StateReader, StateSourceError
    from tidemark.state_processor.changelog_access import settings_changelog
    from tidemark.storage import StorageError, open_storage

    if (checkpoint is None) == (savepoint is None):
        fail(command, "give exactly one of --checkpoint ID and --savepoint PATH", EXIT_USAGE)
    try:
        reader = StateReader.open(open_storage(_storage_url(storage, command)), job, checkpoint_id=checkpoint,
                                  path=savepoint)
    except (StateSourceError, StorageError) as exc:
        fail(command, str(exc), EXIT_USAGE)
    reader.changelog = settings_changelog(reader.metadata.max_parallelism)
    return reader


@state_app.command("inspect")
def inspect(job: str = JobArgument, checkpoint: Optional[int] = CheckpointOption,
            savepoint: Optional[str] = SavepointOption, storage: Optional[str] = StorageOption,
            as_json: bool = typer.Option(False, "--json", help="Print the view as JSON.")) -> None:
    """What a checkpoint or savepoint holds: per stage its tasks, key groups, files and sizes, its
    named states with their kinds and serializers, and source positions."""
    from tidemark.state_processor import inspect_checkpoint

    reader = _reader("state inspect", job, checkpoint, savepoint, storage)
    try:
        view = inspect_checkpoint(reader.source)
    except Exception as exc:  # a corrupted or unreadable state file: named in one line
        fail("state inspect", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", EXIT_FAILED)
    typer.echo(json.dumps(view.to_document(), indent=2, sort_keys=True) if as_json else checkpoint_view_text(view))


@state_app.command("read")
def read(job: str = JobArgument, checkpoint: Optional[int] = CheckpointOption,
         savepoint: Optional[str] = SavepointOption, storage: Optional[str] = StorageOption,
         stage: Optional[str] = typer.Option(None, "--stage", help="The stage (operator id)."),
         state: Optional[str] = typer.Option(None, "--state", help="The keyed state's name (view 'state')."),
         view: View = typer.Option(View.state, "--view", help="What to read."),
         output: Path = typer.Option(..., "--output", help="The file to write (a directory for parquet)."),
         output_format: Format = typer.Option(Format.jsonl, "--format", help="JSON lines, or Parquet through Spark."),
         ) -> None:
    """Write one state (or the timers, operator state or source positions) of a stage to a file:
    rows of key, namespace, user key, value, key group and task."""
    from tidemark.state_processor import StateSourceError
    from tidemark.state_processor.export import Progress, export_jsonl

    command = "state read"
    reader = _reader(command, job, checkpoint, savepoint, storage)
    if view is not View.source_positions and not stage:
        fail(command, f"--view {view.value} needs --stage", EXIT_USAGE)
    if view is View.state and not state:
        fail(command, "--view state needs --state NAME", EXIT_USAGE)

    def progress(p: Progress) -> None:
        print(f"tidemark {command}: {p.done}/{p.total} tasks read, {p.rows} rows, {p.elapsed_s:.1f}s",
              file=sys.stderr)

    try:
        if view is View.state:
            reader.check_state(stage, state)  # type: ignore[arg-type]
        elif stage:
            reader.partitions(stage)
        if output_format is Format.jsonl:
            count = export_jsonl(reader, output, view.value, stage, state, progress)
        else:
            options = {"job": job, "storage": _storage_url(storage, command), "view": view.value,
                       **({"checkpoint": str(checkpoint)} if checkpoint is not None else {"savepoint": str(savepoint)}),
                       **({"stage": stage} if stage else {}), **({"state": state} if state else {})}
            from tidemark.spark.state_source import write_parquet  # Spark: only for Parquet

            count = write_parquet(options, output)
    except StateSourceError as exc:
        fail(command, str(exc), EXIT_USAGE)
    except Exception as exc:  # a corrupted or unreadable state file, the changelog out of reach: one line
        fail(command, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", EXIT_FAILED)
    typer.echo(f"{count} rows written to {output}")
