"""Bootstrapping a savepoint from rows: a keyed stage's state written from a table.

``bootstrap_savepoint(storage, job, {"count_hits": [StateData(ValueStateDescriptor("hits", default=0),
rows)]}, parallelism=2, max_parallelism=128, backend="heap")`` writes a savepoint of ``job`` whose
stage ``count_hits`` holds, for each ``(key, value)`` of ``rows``, that value in state ``hits``:
the stage's tasks at ``parallelism`` under ``max_parallelism`` (the job's), each written by a
``backend`` snapshot in the canonical format (:mod:`.task_writer`), the savepoint verified
(:mod:`.writer`). A job whose stage registers the same descriptor starts from it with
``--from-savepoint`` and reads the values as its own.

A value is what the reader reads (:mod:`.rows`): a value state's value, a list state's list, a map
state's dict, a reducing state's reduced value, an aggregating state's accumulator; ``None`` (or
an empty list or map) writes nothing for the key, and a later row of a key replaces an earlier
one. The state definition recorded is the descriptor's (name, kind, serializers, TTL), so the
serializers must be the job's. Rows are read once, streamed into the tasks' backends: the heap
backend holds the stage's state in memory while it is written, RocksDB on local disk. The
savepoint holds no source positions: a source stage starting from it reads its inputs from the
beginning (:mod:`tidemark.runtime.supervisor.state_claims`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.api import is_stage_name
from tidemark.keygroups import check_max_parallelism
from tidemark.state.descriptors import StateDescriptor, user_key_serializer_of, value_serializer_of
from tidemark.state.snapshot import state_meta
from tidemark.state_processor.encoding import EntryEncoder
from tidemark.state_processor.task_writer import StageWriter
from tidemark.state_processor.writer import (
    SavepointWriter,
    WriteOptionError,
    WrittenSavepoint,
    default_target,
    next_checkpoint_id,
)
from tidemark.storage.base import CheckpointStorage

Progress = Callable[[str], None]
"""Called with one line of text as a long write goes on."""

PROGRESS_EVERY = 100_000  # rows between two progress lines


@dataclass(frozen=True)
class StateData:
    """The rows of one keyed state: ``(key, value)`` pairs, the value as the reader reads it."""

    descriptor: StateDescriptor
    rows: Iterable[tuple[Any, Any]]


def check_layout(parallelism: int, max_parallelism: int, backend: str) -> None:
    """:class:`~.writer.WriteOptionError` for a parallelism, max parallelism or backend no job can have."""
    from tidemark.state.backend_registry import backend_names

    try:
        check_max_parallelism(max_parallelism)
    except ValueError as exc:
        raise WriteOptionError(str(exc)) from None
    if not 1 <= parallelism <= max_parallelism:
        raise WriteOptionError(f"parallelism must be in [1, max parallelism {max_parallelism}], got {parallelism}")
    if backend not in backend_names():
        raise WriteOptionError(f"no state backend {backend!r}; backends: {', '.join(backend_names())}")


def write_rows(writer: StageWriter, states: Sequence[StateData], *, written_at_ms: int,
               progress: Progress | None = None, rows_before: int = 0) -> int:
    """Every row of ``states`` into ``writer``'s tasks; how many rows (``rows_before`` counts
    rows already written, for the progress lines)."""
    count = rows_before
    started = time.monotonic()
    for data in states:
        d = data.descriptor
        encoder = EntryEncoder(state_meta(d), written_at_ms, values=value_serializer_of(d),
                               user_keys=user_key_serializer_of(d))
        for key, value in data.rows:
            for entry in encoder.entries(key, value, writer.max_parallelism):
                writer.add(entry)
            count += 1
            if progress is not None and count % PROGRESS_EVERY == 0:
                progress(f"{count} rows read, {time.monotonic() - started:.1f}s")
    return count - rows_before


def bootstrap_savepoint(storage: CheckpointStorage, job: str, stages: Mapping[str, Sequence[StateData]], *,
                        parallelism: int, max_parallelism: int, backend: str = "heap",
                        target: str | None = None, checkpoint_id: int | None = None,
                        progress: Progress | None = None) -> WrittenSavepoint:
    """A savepoint of ``job`` holding ``stages``' keyed state (see the module docstring), in
    ``target`` (default ``<job>/savepoints/bootstrap-<id>-<ms>``), with ``checkpoint_id`` (default
    one more than the job's newest retained id: :func:`~.writer.next_checkpoint_id`)."""
    check_layout(parallelism, max_parallelism, backend)
    if not stages:
        raise WriteOptionError("name at least one stage to bootstrap")
    for stage in stages:
        if not is_stage_name(stage):
            raise WriteOptionError(f"{stage!r} cannot name a stage: 1-64 letters, digits, '_' or '-'")
    cid = next_checkpoint_id(storage, job) if checkpoint_id is None else checkpoint_id
    written_at = int(time.time() * 1000)
    with SavepointWriter(storage, job, target or default_target(job, "bootstrap", cid), checkpoint_id=cid,
                         max_parallelism=max_parallelism) as savepoint:
        for stage, states in stages.items():
            metas = [state_meta(data.descriptor) for data in states]
            if len({m["name"] for m in metas}) != len(metas):
                raise WriteOptionError(f"stage {stage!r} is given a state twice")
            with StageWriter(stage, parallelism, max_parallelism, backend, metas) as writer:
                rows = write_rows(writer, states, written_at_ms=written_at, progress=progress)
                for index in sorted(writer.tasks):
                    savepoint.add([writer.tasks[index].finish(cid, savepoint.files)])
                    if progress is not None:
                        progress(f"stage {stage}: {index + 1}/{parallelism} tasks written ({rows} rows)")
        return savepoint.commit()
