"""A stage worker's SparkSession: local mode tuned for one small machine and fast tests by
default, or a driver whose tasks run on a Spark standalone cluster's executors.

Where the tasks run is the session's master (``spark.master`` of the settings,
:class:`~tidemark.config.settings.SparkSettings`): ``local[N]`` runs them in the driver's JVM; with
``spark://host:port`` the driver asks the cluster's master for executors, which reach it back at
``driver_host`` and receive the jars of ``spark.jars`` (the Kafka connector's) from it. Executors
size themselves by Spark's own keys (``spark.executor.cores``, ``spark.executor.memory``,
``spark.cores.max``) in ``extra_conf``. ``docs/concepts/what-runs-where.md`` says what runs where.

Lifecycle: :func:`spark_session` returns the process-wide session (Spark allows one active
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
class SessionOptions:
    """Where the session runs its tasks and how it is sized; the defaults suit 2 cores and a test suite."""

    app_name: str = "tidemark"
    master: str = "local[2]"  # local[N], local[*] or spark://host:port (SparkSettings.master)
    driver_host: str = "127.0.0.1"  # where the driver binds and the executors reach it
    shuffle_partitions: int = 2
    driver_memory: str = "1g"
    log_level: str = "ERROR"
    java_options: str = ""  # spark.driver.extraJavaOptions (in local mode the driver's JVM runs the tasks)
    class_archive: bool = True  # map the JVM class archive when built (tidemark.spark.class_archive)
    extra_conf: dict[str, str] = field(default_factory=dict)


def _local_cores(master: str) -> str | None:
    """N of ``local[N]``; None for ``local[*]`` and a cluster (Spark counts the cores it has)."""
    cores = master.removeprefix("local[").removesuffix("]")
    return cores if cores.isdigit() else None


def spark_conf(options: SessionOptions) -> dict[str, str]:
    """The Spark configuration of a session made with ``options``: Tidemark's own, then ``extra_conf``."""
    conf = {
        "spark.master": options.master,
        "spark.app.name": options.app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(options.shuffle_partitions),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
        "spark.sql.streaming.minBatchesToRetain": "10",
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
        "spark.driver.memory": options.driver_memory,
        "spark.driver.bindAddress": options.driver_host,
        "spark.driver.host": options.driver_host,
        "spark.python.worker.reuse": "true",
    }
    cores = _local_cores(options.master)
    if cores is not None:
        conf["spark.default.parallelism"] = cores
    java_options = with_archive(options.java_options) if options.class_archive else options.java_options
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    return {**conf, **options.extra_conf}


def spark_session(options: SessionOptions = SessionOptions()) -> SparkSession:
    """Create (or return the active) session of :func:`spark_conf`: UI off, Arrow on, quiet logs.

    The JVM maps the class archive of :mod:`tidemark.spark.class_archive` when it has been built.
    Tidemark's Python data source (``tidemark-kafka``) is registered by who reads with it
    (:func:`tidemark.spark.datasource.register`, ``StageSource.prepare``).
    """
    java_home = find_java_home()
    if java_home:
        os.environ["JAVA_HOME"] = java_home
    # Spark's Python workers, in local mode and on a cluster's executors alike, run this interpreter
    # (the same path on the executors' machines: the Tidemark image), which must import tidemark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in spark_conf(options).items():
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
