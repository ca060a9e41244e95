"""A class-data-sharing archive of the classes a Spark driver loads, so that each stage worker's
JVM maps them instead of reading, parsing and verifying some ten thousand classes again.

Measured on the 2-core machine (one local session with the Kafka connector, C1 only): the session
started in 4.0 s instead of 6.3 s and ran its first query in 1.3 s instead of 2.6 s; four sessions
started at once (a failover of a stage on several workers) were all done in 15 s instead of 23 s.
The archive is mapped read-only and shared by every JVM on the machine.

Lifecycle: :func:`ensure_archive` builds the archive once per JDK and PySpark installation (the
name is a digest of both, :func:`archive_path`): a training run in a child process
(:mod:`tidemark.spark.class_archive_training`) starts a local session with
``-XX:ArchiveClassesAtExit``, runs what a stage worker runs (a batch to Arrow, a streaming query
into ``foreachBatch``, and Spark's Kafka connector on a broker when one is given), and the JVM
writes the archive as it exits. A file lock keeps two builders (a test session's workers, a demo)
from training at the same time; a build removes the archives of installations that are gone (a
deleted virtualenv) or were replaced at the same path (a virtualenv created again), as each
archive's ``.origin`` file names them. :func:`with_archive` adds ``-XX:SharedArchiveFile`` to a JVM's
options when the archive exists. With ``-Xshare:auto`` an archive that does not fit (another JDK,
changed jars, other heap settings) is ignored by the JVM, never an error; a missing one only
means a slower start. The image builds it at build time (``Dockerfile``).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from tidemark.chassis.logs import get_logger
from tidemark.jvm import find_java_home
from tidemark.maven import default_cache_dir

log = get_logger(__name__)

BUILD_TIMEOUT_S = 300.0
QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"  # a misfit archive is skipped silently


def _installation() -> tuple[Path, Path]:
    """(the JDK's home, PySpark's jars directory) the archive's classes come from."""
    import pyspark

    return Path(find_java_home() or "java-on-path").resolve(), Path(pyspark.__file__).resolve().parent / "jars"


def _installation_digest() -> str:
    """The JDK (its path and ``release``) and PySpark's jars (path, name, size and time of each)."""
    java_home, jars = _installation()
    digest = hashlib.sha256(str(java_home).encode())
    release = java_home / "release"
    if release.is_file():
        digest.update(release.read_bytes())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar}:{stat.st_size}:{int(stat.st_mtime)}".encode())
    return digest.hexdigest()[:16]


def archive_path(cache_dir: Path | None = None) -> Path:
    """Where the archive of this JDK and PySpark installation is (or will be)."""
    return (cache_dir or default_cache_dir()) / "spark-classes" / f"{_installation_digest()}.jsa"


def remove_orphans(directory: Path, current: Path | None = None) -> None:
    """Remove the archives (and their files) of installations that are gone: another
    virtualenv's PySpark or JDK deleted since, or replaced where it was (a virtualenv created
    again at the same path: the archive ``current`` of that installation is not the one its
    ``.origin`` names). Each archive is about 170 MiB."""
    here = [str(p) for p in _installation()] if current is not None else None
    for origin in directory.glob("*.origin"):
        paths = origin.read_text(encoding="utf-8").splitlines()
        replaced = current is not None and paths == here and origin.stem != current.stem
        if all(Path(path).exists() for path in paths) and not replaced:
            continue
        for leftover in directory.glob(f"{origin.stem}.*"):
            leftover.unlink(missing_ok=True)


def with_archive(java_options: str, cache_dir: Path | None = None) -> str:
    """``java_options`` plus the options that map the archive, when it has been built."""
    path = archive_path(cache_dir)
    if not path.is_file():
        return java_options
    return " ".join(part for part in (java_options, f"-XX:SharedArchiveFile={path}", QUIET) if part)


def ensure_archive(jars: list[str] | None = None, bootstrap: str | None = None,
                   cache_dir: Path | None = None) -> Path | None:
    """The archive, built first if missing (about 30 s, once); None when the build failed, which
    is logged once (a ``.failed`` file keeps later calls from trying again) and otherwise harmless. ``jars``: the session's ``spark.jars`` (the Kafka
    connector); ``bootstrap``: a broker the training query may read from."""
    path = archive_path(cache_dir)
    if path.is_file():
        return path
    failed = path.with_suffix(".failed")
    if failed.is_file():  # not again at every start: remove the file to try again
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file() or failed.is_file():  # built (or tried) by another process meanwhile
            return path if path.is_file() else None
        remove_orphans(path.parent, path)
        return _build(path, jars or [], bootstrap)


def _build(path: Path, jars: list[str], bootstrap: str | None) -> Path | None:
    started = time.monotonic()
    partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
    command = [sys.executable, "-m", "tidemark.spark.class_archive_training", str(partial), "--jars", ",".join(jars)]
    if bootstrap:
        command += ["--bootstrap", bootstrap]
    log.info("building the JVM class archive of Spark (once per JDK and PySpark)", path=str(path))
    journal = path.with_suffix(".log")
    try:
        with open(journal, "w") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        code = None
    if code != 0 or not partial.is_file() or partial.stat().st_size == 0:
        partial.unlink(missing_ok=True)
        path.with_suffix(".failed").write_text(f"exit code {code}; see {journal}\n", encoding="utf-8")
        log.warning("the JVM class archive was not built; Spark starts without it (remove the .failed file to "
                    "try again)", exit_code=code, journal=str(journal))
        return None
    path.with_suffix(".origin").write_text("\n".join(str(p) for p in _installation()) + "\n", encoding="utf-8")
    partial.replace(path)
    log.info("JVM class archive built", path=str(path), seconds=round(time.monotonic() - started, 1),
             mib=round(path.stat().st_size / 2**20))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark.spark.class_archive",
                                     description="Build the JVM class archive of Spark for this JDK and PySpark.")
    parser.add_argument("--jars", default="", help="comma-separated spark.jars of the training session "
                        "(default: Spark's Kafka connector)")
    parser.add_argument("--bootstrap", help="a broker the training reads from with Spark's Kafka connector")
    args = parser.parse_args(argv)
    jars = [jar for jar in args.jars.split(",") if jar]
    if not jars:  # what stage workers load by default: the connector
        from tidemark.spark.kafka_connector import connector_jars

        jars = [str(jar) for jar in connector_jars()]
    path = ensure_archive(jars, args.bootstrap)
    print(path if path else "not built; see the log")
    return 0 if path else 1


if __name__ == "__main__":
    sys.exit(main())
