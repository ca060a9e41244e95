"""A local-mode SparkSession tuned for one small machine and fast tests.

Lifecycle: :func:`local_session` returns the process-wide session (Spark allows one active
SparkContext per JVM); the caller that created it calls ``spark.stop()`` when done. Streaming
queries need a checkpoint directory: :func:`temp_checkpoint_location` makes a fresh one (the
caller removes it); a worker process uses :func:`query_checkpoint_location`, a directory owned by
the process that is removed when the process ends, or by the next worker after a SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from tidemark.jvm import find_java_home
from tidemark.spark.class_archive import with_archive

# Spark's default manager of a query's checkpoint files (FileContext-based) renames each offsets and
# commits file through Hadoop's link-status check, which on a machine without Hadoop's native
# library spawns a `readlink` process per file: about 30 processes and 60 ms per micro-batch. The
# FileSystem-based one renames with java.io, atomic on a local disk, where Tidemark keeps every
# query's checkpoint (a directory of the process, query_checkpoint_location; Tidemark's own state
# is in its checkpoints, not in Spark's).
CHECKPOINT_FILE_MANAGER = ("org.apache.spark.sql.execution.streaming.checkpointing."
                           "FileSystemBasedCheckpointFileManager")


@dataclass(frozen=True, slots=True)
class LocalSessionOptions:
    """How the local session is sized; the defaults suit 2 cores and a test suite."""

    app_name: str = "tidemark"
    cores: int = 2
    shuffle_partitions: int = 2
    driver_memory: str = "1g"
    log_level: str = "ERROR"
    java_options: str = ""  # spark.driver.extraJavaOptions (the driver runs the executors in local mode)
    class_archive: bool = True  # map the JVM class archive when built (tidemark.spark.class_archive)
    extra_conf: dict[str, str] = field(default_factory=dict)


def local_session(options: LocalSessionOptions = LocalSessionOptions()) -> SparkSession:
    """Create (or return the active) local-mode session: UI off, Arrow on, quiet logs.

    The JVM maps the class archive of :mod:`tidemark.spark.class_archive` when it has been built.
    Tidemark's Python data source (``tidemark-kafka``) is registered by who reads with it
    (:func:`tidemark.spark.datasource.register`, ``StageSource.prepare``).
    """
    java_home = find_java_home()
    if java_home:
        os.environ["JAVA_HOME"] = java_home
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers must import tidemark
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{options.cores}]")
        .appName(options.app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(options.shuffle_partitions))
        .config("spark.default.parallelism", str(options.cores))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.streaming.minBatchesToRetain", "10")
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
        .config("spark.driver.memory", options.driver_memory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.python.worker.reuse", "true")
    )
    java_options = with_archive(options.java_options) if options.class_archive else options.java_options
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    for key, value in options.extra_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(options.log_level)
    return spark


def temp_checkpoint_location(prefix: str = "tidemark-ckpt-", root: str | Path | None = None) -> str:
    """A new, empty directory for a streaming query's ``checkpointLocation``."""
    return tempfile.mkdtemp(prefix=prefix, dir=str(root) if root else None)


QUERY_DIR_PREFIX = "tidemark-query-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def reclaim_query_locations(root: str | Path | None = None) -> list[Path]:
    """Remove the query checkpoint directories of processes that are gone (a SIGKILLed worker
    cannot remove its own); returns the removed ones."""
    base = Path(root or tempfile.gettempdir())
    removed = []
    for candidate in base.glob(f"{QUERY_DIR_PREFIX}*-*"):
        owner = candidate.name[len(QUERY_DIR_PREFIX):].split("-", 1)[0]
        if candidate.is_dir() and owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(candidate, ignore_errors=True)
            removed.append(candidate)
    return removed


@contextlib.contextmanager
def query_checkpoint_location(name: str, root: str | Path | None = None) -> Iterator[str]:
    """A fresh ``checkpointLocation`` (``tidemark-query-<pid>-<name>-*`` in the temp directory)
    for the life of the block: orphans of dead processes are reclaimed first, and the directory
    is removed on the way out (also on SystemExit, which a worker raises on SIGTERM)."""
    reclaim_query_locations(root)
    safe = "".join(c if c.isalnum() or c in "._" else "_" for c in name)[:64]
    location = tempfile.mkdtemp(prefix=f"{QUERY_DIR_PREFIX}{os.getpid()}-{safe}-",
                                dir=str(root) if root else None)
    try:
        yield location
    finally:
        shutil.rmtree(location, ignore_errors=True)
