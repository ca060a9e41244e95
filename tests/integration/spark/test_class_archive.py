"""The JVM class archive of Spark's classes (``tidemark.spark.class_archive``), built for real in
a scratch cache: the training run dumps it once, later sessions load most of their classes from
it, a second build reuses it, and an archive that does not fit is ignored, never an error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tidemark.spark.class_archive import archive_path, ensure_archive
from tidemark.spark.kafka_connector import connector_jars

SESSION = """
import sys
from tidemark.spark.session import SessionOptions, spark_session
spark = spark_session(SessionOptions(java_options="-Xlog:class+load=info:file=" + sys.argv[1]))
assert spark.range(10).toArrow().num_rows == 10
spark.stop()
"""


def _session_classes(cache: Path, tmp_path: Path) -> tuple[int, int]:
    """(classes loaded from the archive, classes loaded) by a session started in a child process
    under ``cache``, from the JVM's class-load log."""
    log = tmp_path / f"classes-{cache.name}.log"
    result = subprocess.run([sys.executable, "-c", SESSION, str(log)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TIDEMARK_CACHE_DIR": str(cache)})
    assert result.returncode == 0, result.stderr[-2000:]
    lines = log.read_text().splitlines()
    return sum("source: shared objects file (top)" in line for line in lines), len(lines)


def test_the_archive_is_built_once_and_later_sessions_load_their_classes_from_it(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    cache = tmp_path / "cache"
    jars = [str(jar) for jar in connector_jars()]
    path = ensure_archive(jars, kafka_bootstrap, cache_dir=cache)
    assert path == archive_path(cache) and path.stat().st_size > 50 * 2**20, path
    built = path.stat().st_mtime_ns
    assert ensure_archive(jars, kafka_bootstrap, cache_dir=cache) == path and path.stat().st_mtime_ns == built
    assert not list(path.parent.glob("*.partial"))
    shared, loaded = _session_classes(cache, tmp_path)
    assert shared > 5000 and shared > loaded / 2, (shared, loaded)


def test_an_archive_that_does_not_fit_is_ignored(tmp_path: Path) -> None:
    cache = tmp_path / "misfit"
    path = archive_path(cache)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a class archive" * 1000)
    shared, loaded = _session_classes(cache, tmp_path)
    assert shared == 0 and loaded > 5000, (shared, loaded)
