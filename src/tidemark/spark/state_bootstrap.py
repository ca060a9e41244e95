"""Bootstrapping a savepoint from a DataFrame: a keyed stage's state written from a table, by
the executors, one new task per Spark partition.

``bootstrap_dataframe(df, storage_url=..., job="access-log-counts", stage="count_hits",
descriptor=ValueStateDescriptor("hits", default=0), key="url", value="hits", parallelism=2,
max_parallelism=128)`` writes the savepoint :func:`tidemark.state_processor.bootstrap.bootstrap_savepoint`
writes from rows, from the DataFrame's ``key`` column and its ``value`` column (several columns:
the value is a dict of them, by column name). Each row goes to the new task whose key groups hold
its key (the key group its hash gives under ``max_parallelism``): the rows are partitioned by
task, so partition ``i`` holds exactly task ``i``'s rows, and each executor writes its task's
canonical snapshot into checkpoint storage itself (the storage URL must reach it from every
executor, as a job's workers reach it). Only the tasks' handles come back to the driver, which
writes the ``_metadata`` and verifies the savepoint. No process holds more than one task's rows
(with the heap backend, in memory while its snapshot is written; RocksDB on local disk).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame

from tidemark.keygroups import key_to_bytes, hash_key_bytes, operator_index
from tidemark.protocol.messages import TaskSnapshot
from tidemark.state.descriptors import StateDescriptor
from tidemark.state.snapshot import state_meta
from tidemark.state_processor.bootstrap import Progress, check_layout
from tidemark.state_processor.writer import (
    SavepointWriter,
    WriteOptionError,
    WrittenSavepoint,
    default_target,
    next_checkpoint_id,
)


@dataclass(frozen=True)
class WrittenTask:
    """What an executor sends back for the task it wrote: its snapshot, the rows written and the
    peak RSS of its Python worker (KiB, as ``getrusage`` gives it)."""

    snapshot: TaskSnapshot
    rows: int
    peak_rss_kib: int
    seconds: float


def _key(value: Any) -> Any:
    return bytes(value) if isinstance(value, (bytearray, memoryview)) else value


def bootstrap_dataframe(df: DataFrame, *, storage_url: str, job: str, stage: str, descriptor: StateDescriptor,
                        key: str, value: str | Sequence[str], parallelism: int, max_parallelism: int,
                        backend: str = "heap", target: str | None = None, checkpoint_id: int | None = None,
                        progress: Progress | None = None) -> tuple[WrittenSavepoint, list[WrittenTask]]:
    """The savepoint written from ``df`` (see the module docstring) and what each task's writer
    reported."""
    from tidemark.storage import open_storage

    check_layout(parallelism, max_parallelism, backend)
    columns = [value] if isinstance(value, str) else list(value)
    missing = [c for c in (key, *columns) if c not in df.columns]
    if missing:
        raise WriteOptionError(f"the DataFrame has no column {missing[0]!r}; its columns: {', '.join(df.columns)}")
    storage = open_storage(storage_url)
    cid = next_checkpoint_id(storage, job) if checkpoint_id is None else checkpoint_id
    meta = state_meta(descriptor)
    written_at = int(time.time() * 1000)
    single = isinstance(value, str)
    with SavepointWriter(storage, job, target or default_target(job, "bootstrap", cid), checkpoint_id=cid,
                         max_parallelism=max_parallelism) as savepoint:
        target_dir = savepoint.target

        def subtask(row: Any) -> int:
            group = hash_key_bytes(key_to_bytes(_key(row[0]))) % max_parallelism
            return int(operator_index(max_parallelism, parallelism, group))

        def write_task(index: int, rows: Iterator[tuple[int, Any]]) -> Iterator[WrittenTask]:
            from tidemark.checkpoint_store.layout import shared_dir
            from tidemark.state_processor.encoding import EntryEncoder
            from tidemark.state_processor.task_writer import StageWriter
            from tidemark.storage import open_storage as open_on_executor
            from tidemark.storage.scoped import SnapshotStorage

            started = time.monotonic()
            encoder = EntryEncoder(meta, written_at)
            count = 0
            with StageWriter(stage, parallelism, max_parallelism, backend, [meta], subtasks=[index]) as writer:
                task = writer.tasks[index]
                for _, row in rows:
                    item = row[1] if single else dict(zip(columns, row[1:]))
                    for entry in encoder.entries(_key(row[0]), item, max_parallelism):
                        task.add(entry)
                    count += 1
                files = SnapshotStorage(open_on_executor(storage_url), target_dir, shared_dir(job))
                snapshot = task.finish(cid, files)
            yield WrittenTask(snapshot, count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                              time.monotonic() - started)

        by_task = (df.select(key, *columns).rdd.map(lambda row: (subtask(row), tuple(row)))
                   .partitionBy(parallelism, lambda index: index))
        written = by_task.mapPartitionsWithIndex(write_task).collect()
        if sorted(w.snapshot.subtask_index for w in written) != list(range(parallelism)):
            raise RuntimeError(f"the executors wrote tasks {sorted(w.snapshot.subtask_index for w in written)}, "
                               f"not 0..{parallelism - 1}")
        savepoint.add(w.snapshot for w in written)
        if progress is not None:
            progress(f"stage {stage}: {parallelism} tasks written ({sum(w.rows for w in written)} rows)")
        return savepoint.commit(), written


def check_parquet(path: str) -> None:
    """:class:`~tidemark.state_processor.WriteOptionError` unless ``path`` is a Parquet file (its
    magic at both ends) or a directory holding ``*.parquet`` files: a wrong path is refused in one
    line before Spark starts (whose reader would log a stack trace)."""
    from pathlib import Path

    where = Path(path)
    if where.is_dir():
        if not any(where.rglob("*.parquet")):
            raise WriteOptionError(f"{path} holds no .parquet file")
        return
    try:
        with where.open("rb") as file:
            head = file.read(4)
            file.seek(-4, 2)
            tail = file.read(4)
    except OSError as exc:
        raise WriteOptionError(f"cannot read {path}: {exc.strerror or exc}") from None
    if head != b"PAR1" or tail != b"PAR1":
        raise WriteOptionError(f"{path} is not a Parquet file")


def bootstrap_parquet(path: str, *, spark: Any = None, **options: Any) -> WrittenSavepoint:
    """:func:`bootstrap_dataframe` of the Parquet file or directory at ``path`` (local, checked by
    :func:`check_parquet` first), read with ``spark`` (default: a local session, stopped
    afterwards); ``options`` are the function's."""
    from tidemark.spark.session import spark_session

    check_parquet(path)
    session = spark or spark_session()
    try:
        return bootstrap_dataframe(session.read.parquet(path), **options)[0]
    finally:
        if spark is None:
            session.stop()
