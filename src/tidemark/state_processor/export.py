"""Writing one view of a checkpoint's state to a file as JSON lines, through the Python reader,
one old task at a time (Parquet goes through Spark: :func:`tidemark.spark.state_source.write_parquet`).

A view is ``state`` (one keyed state's rows; ``state`` names it), ``timers``, ``operator_state``
or ``source_positions``. ``progress`` is called after each old task with a :class:`Progress`
(the CLI prints it as one line on long reads).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidemark.state_processor.reader import StateReader

VIEWS = ("state", "timers", "operator_state", "source_positions")


@dataclass(frozen=True, slots=True)
class Progress:
    done: int  # old tasks read
    total: int
    rows: int  # rows written so far
    elapsed_s: float


def view_rows(reader: StateReader, view: str, stage: str | None, state: str | None,
              progress: Callable[[Progress], None] | None = None) -> Iterator[dict[str, Any]]:
    """The rows of ``view`` as JSON objects, keyed views one old task (partition) at a time."""
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; views: {', '.join(VIEWS)}")
    if view == "source_positions":
        yield from (row.to_json() for row in reader.source_positions(stage))
        return
    if stage is None:
        raise ValueError(f"the {view} view needs a stage")
    if view == "operator_state":
        yield from (row.to_json() for row in reader.operator_state(stage))
        return
    if view == "state":
        if state is None:
            raise ValueError("the state view needs a state name")
        reader.check_state(stage, state)
    partitions = reader.partitions(stage)
    started, rows = time.monotonic(), 0
    for done, partition in enumerate(partitions, 1):
        task_rows = reader.read(stage, state, partition) if view == "state" else reader.timers(stage, partition)  # type: ignore[arg-type]
        for row in task_rows:
            rows += 1
            yield row.to_json()
        if progress is not None:
            progress(Progress(done, len(partitions), rows, time.monotonic() - started))


def export_jsonl(reader: StateReader, output: Path, view: str, stage: str | None, state: str | None,
                 progress: Callable[[Progress], None] | None = None) -> int:
    """Write ``view``'s rows to ``output`` as JSON lines (written whole or not at all); how many."""
    partial = output.with_name(output.name + ".partial")
    count = 0
    try:
        with partial.open("w", encoding="utf-8") as out:
            for row in view_rows(reader, view, stage, state, progress):
                out.write(json.dumps(row, sort_keys=True) + "\n")
                count += 1
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return count
