"""``tidemark state inspect|read|bootstrap|transform``: a job's state in its retained checkpoints
and savepoints, read, and written into new savepoints; and ``tidemark state get``, a key's live
value in a running job through the coordinator (:func:`tidemark.admin.coordinator_commands.state_get`).

Thin: each command parses its options and calls :mod:`tidemark.state_processor`. Checkpoint
storage is ``--storage`` (default: the settings', ``TIDEMARK_CHECKPOINT_STORAGE_URL``, else the
home's ``checkpoints``). Exit status (:mod:`tidemark.exit_codes`): 0 done; 2 a wrong job, id,
path, stage, state, option, spec, input row or savepoint target, named in one line on stderr; 1 the
state could not be read or written (a corrupted file, the changelog or storage out of reach, a
spec's function that raised).
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
from tidemark.api import StateBackendKind
from tidemark.exit_codes import EXIT_FAILED, EXIT_USAGE

state_app = typer.Typer(help="Read a job's state from its retained checkpoints and savepoints, write "
                        "savepoints (bootstrapped from a table, or derived from another), or read a key's "
                        "value live from a running job (get).", no_args_is_help=True)

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


class Kind(str, enum.Enum):
    value = "value"
    list = "list"
    map = "map"


TargetOption = typer.Option(None, "--target", help="The new savepoint's directory, relative to checkpoint storage, "
                            "inside <job>/savepoints/ (default: a new one there).")
ParallelismOption = typer.Option(None, "--parallelism", min=1, help="Tasks per stage written.")
BackendOption = typer.Option(None, "--backend", help="The backend whose canonical snapshots write the state.")


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


def _progress(command: str):  # type: ignore[no-untyped-def]
    def progress(line: str) -> None:
        print(f"tidemark {command}: {line}", file=sys.stderr)

    return progress


def _written(command: str, run) -> None:  # type: ignore[no-untyped-def]
    """Run ``run`` (a write) and print where the savepoint went; a user's error exits 2 in one
    line, anything else 1."""
    from tidemark.state_processor import StateSourceError, WriteOptionError
    from tidemark.state_processor.spec import SpecError
    from tidemark.storage import InvalidStoragePath

    try:
        written = run()
    except (StateSourceError, WriteOptionError, SpecError, InvalidStoragePath) as exc:
        fail(command, str(exc), EXIT_USAGE)
    except Exception as exc:  # a corrupted file, storage out of reach, a spec's function that raised: one line
        fail(command, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", EXIT_FAILED)
    metadata = written.metadata
    typer.echo(f"savepoint {metadata.checkpoint_id} of job {metadata.job_id} written to {written.path}: "
               f"{len({t.operator_id for t in metadata.tasks})} stages, {len(metadata.tasks)} tasks, "
               f"max parallelism {metadata.max_parallelism}, {metadata.state_size_bytes} bytes")
    typer.echo(f"start the job from it with --from-savepoint {written.path}")


@state_app.command("bootstrap")
def bootstrap(job: str = JobArgument, storage: Optional[str] = StorageOption,
              spec: Optional[str] = typer.Option(None, "--spec", help="module:function or file.py:function "
                                                 "giving {stage: [StateData, ...]} (instead of --stage/--state/--input)."),
              stage: Optional[str] = typer.Option(None, "--stage", help="The stage (operator id) to write."),
              state: Optional[str] = typer.Option(None, "--state", help="The keyed state's name."),
              kind: Kind = typer.Option(Kind.value, "--kind", help="The state's kind (values: a list, an object)."),
              rows: Optional[Path] = typer.Option(None, "--input", help="JSON lines, one row an object; or "
                                                  "Parquet (--format parquet), one row a row."),
              input_format: Format = typer.Option(Format.jsonl, "--format", help="JSON lines, or Parquet through "
                                                  "Spark: each task written by an executor."),
              key_field: str = typer.Option("key", "--key-field", help="The field holding the key."),
              value_field: str = typer.Option("value", "--value-field", help="The field holding the value."),
              parallelism: Optional[int] = ParallelismOption,
              max_parallelism: int = typer.Option(128, "--max-parallelism", min=1,
                                                  help="The job's max parallelism (key groups)."),
              backend: Optional[StateBackendKind] = BackendOption, target: Optional[str] = TargetOption,
              checkpoint_id: Optional[int] = typer.Option(None, "--checkpoint-id", min=0,
                                                          help="Default: after the job's newest retained one."),
              ) -> None:
    """Write a savepoint holding a stage's keyed state from a table: (key, value) rows from JSON
    lines or Parquet (a state with the default serializer) or a Python spec; a job starts from it
    with --from-savepoint."""
    from tidemark.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
    from tidemark.state_processor import StateData, bootstrap_savepoint
    from tidemark.state_processor.spec import bootstrap_spec, json_rows
    from tidemark.storage import open_storage

    command = "state bootstrap"
    if spec is not None and (stage or state or rows):
        fail(command, "give either --spec or --stage, --state and --input", EXIT_USAGE)
    if spec is not None and input_format is Format.parquet:
        fail(command, "--format parquet reads --input: give --stage, --state and --input", EXIT_USAGE)
    if spec is None and not (stage and state and rows):
        fail(command, "give --stage, --state and --input (or --spec)", EXIT_USAGE)
    url = _storage_url(storage, command)

    def run():  # type: ignore[no-untyped-def]
        if spec is not None:
            stages = bootstrap_spec(spec)
        else:
            descriptor = {Kind.value: ValueStateDescriptor, Kind.list: ListStateDescriptor,
                          Kind.map: MapStateDescriptor}[kind](state)
            if input_format is Format.parquet:
                from tidemark.spark.state_bootstrap import bootstrap_parquet  # Spark: only for Parquet

                return bootstrap_parquet(str(rows), storage_url=url, job=job, stage=stage, descriptor=descriptor,
                                         key=key_field, value=value_field, parallelism=parallelism or 1,
                                         max_parallelism=max_parallelism,
                                         backend=(backend or StateBackendKind.HEAP).value,
                                         target=target, checkpoint_id=checkpoint_id, progress=_progress(command))
            stages = {stage: [StateData(descriptor, json_rows(rows, key_field, value_field))]}  # type: ignore[arg-type]
        return bootstrap_savepoint(open_storage(url), job, stages, parallelism=parallelism or 1,
                                   max_parallelism=max_parallelism, backend=(backend or StateBackendKind.HEAP).value,
                                   target=target, checkpoint_id=checkpoint_id, progress=_progress(command))

    _written(command, run)


def _pair(command: str, option: str, text: str, separator: str) -> tuple[str, str]:
    left, sep, right = text.partition(separator)
    if not sep or not left or not right:
        fail(command, f"{option} takes A{separator}B, got {text!r}", EXIT_USAGE)
    return left, right


@state_app.command("transform")
def transform(job: str = JobArgument, checkpoint: Optional[int] = CheckpointOption,
              savepoint: Optional[str] = SavepointOption, storage: Optional[str] = StorageOption,
              spec: Optional[str] = typer.Option(None, "--spec", help="module:function or file.py:function giving "
                                                 "a list of operations, applied first."),
              remove_stage: list[str] = typer.Option([], "--remove-stage", help="Drop a stage's state (repeatable)."),
              rename_stage: list[str] = typer.Option([], "--rename-stage", help="OLD=NEW: a stage's state under "
                                                     "a new name (repeatable)."),
              remove_state: list[str] = typer.Option([], "--remove-state", help="STAGE/STATE: drop one keyed "
                                                     "state (repeatable)."),
              map_state: list[str] = typer.Option([], "--map", help="STAGE/STATE=module:function: map each value "
                                                  "with function(key, value) (repeatable)."),
              max_parallelism: Optional[int] = typer.Option(None, "--max-parallelism", min=1,
                                                            help="Re-partition keyed state into this many key groups."),
              parallelism: Optional[int] = ParallelismOption, backend: Optional[StateBackendKind] = BackendOption,
              target: Optional[str] = TargetOption) -> None:
    """Derive a new savepoint from a checkpoint or savepoint: remove or rename stages, remove or
    map keyed states, change the max parallelism. Operations apply in order: the spec's, then
    --remove-stage, --rename-stage, --remove-state, --map (naming stages as renamed)."""
    from tidemark.state_processor import MapState, RemoveStage, RemoveState, RenameStage, transform_savepoint
    from tidemark.state_processor.spec import transform_spec, value_function

    command = "state transform"
    renames = [_pair(command, "--rename-stage", r, "=") for r in rename_stage]
    removed_states = [_pair(command, "--remove-state", r, "/") for r in remove_state]
    maps = [(_pair(command, "--map", left, "/"), ref) for left, ref in (_pair(command, "--map", m, "=") for m in map_state)]
    reader = _reader(command, job, checkpoint, savepoint, storage)

    def run():  # type: ignore[no-untyped-def]
        operations = transform_spec(spec) if spec is not None else []
        operations += [RemoveStage(s) for s in remove_stage]
        operations += [RenameStage(old, new) for old, new in renames]
        operations += [RemoveState(stage, state) for stage, state in removed_states]
        operations += [MapState(stage, state, value_function(ref)) for (stage, state), ref in maps]
        if not operations and max_parallelism is None and parallelism is None and backend is None:
            from tidemark.state_processor.spec import SpecError

            raise SpecError("nothing to change: give operations (--spec, --remove-stage, --rename-stage, "
                            "--remove-state, --map) or --max-parallelism, --parallelism, --backend")
        return transform_savepoint(reader.source, operations, target=target, max_parallelism=max_parallelism,
                                   parallelism=parallelism, backend=backend.value if backend else None,
                                   changelog=reader.changelog, progress=_progress(command))

    _written(command, run)
