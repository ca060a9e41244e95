"""A class-data-sharing archive of the classes the embedded Apache Kafka broker loads, so that a
broker's JVM maps them instead of reading, parsing and verifying them again at every start.

A restarted broker is what every Tidemark process waits for after a broker crash (the figures are
in docs/architecture.md).

Lifecycle: a broker started while no archive exists for its JDK and Kafka jars gets
``-XX:ArchiveClassesAtExit`` with a partial file in its state directory, which the JVM writes as it
exits after a SIGTERM (a SIGKILL writes nothing). Once that broker has stopped,
:func:`adopt_partial` checks the partial file with a JVM that must map it (a truncated archive
crashes a JVM that maps it, so a partial one is never adopted without that check) and moves it to
its place in the jar cache, where every later broker start on the machine maps it
(:func:`archive_options`). With ``-Xshare:auto`` an archive that does not fit (another JDK, other
jars) is ignored by the JVM, never an error.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

QUIET = ("-Xshare:auto", "-Xlog:cds=off", "-Xlog:cds+dynamic=off")  # a misfit archive is skipped silently
PARTIAL = "classes.jsa.partial"
CHECK_TIMEOUT_S = 60.0


def archive_path(java: str, libs: Path) -> Path:
    """Where the archive of this JDK (its binary's path, size and time) and these jars is kept."""
    binary = Path(java).resolve()
    stat = binary.stat()
    digest = hashlib.sha256(f"{binary}:{stat.st_size}:{int(stat.st_mtime)}:{libs.resolve()}".encode())
    return libs.parent / f"broker-classes-{digest.hexdigest()[:16]}.jsa"


def archive_options(archive: Path, partial: Path) -> tuple[str, ...]:
    """The JVM options of a broker start: map ``archive`` when it exists, else write ``partial``
    at exit (a leftover partial file from an earlier start is removed first)."""
    partial.unlink(missing_ok=True)
    if archive.is_file():
        return (f"-XX:SharedArchiveFile={archive}", *QUIET)
    return (f"-XX:ArchiveClassesAtExit={partial}", *QUIET)


def adopt_partial(java: str, java_options: Sequence[str], classpath: str, partial: Path, archive: Path) -> bool:
    """Move ``partial`` (written by a broker JVM that has exited) to ``archive`` when a JVM with the
    broker's options and classpath maps it (``-Xshare:on`` fails on an archive it cannot use);
    remove it otherwise. True when adopted."""
    if not partial.is_file():
        return False
    try:
        if archive.is_file() or partial.stat().st_size == 0:
            return False
        argv = [java, *java_options, f"-XX:SharedArchiveFile={partial}", "-Xshare:on", "-cp", classpath, "-version"]
        check = subprocess.run(argv, capture_output=True, timeout=CHECK_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if check.returncode != 0:
            return False
        os.replace(partial, archive)
        return True
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        partial.unlink(missing_ok=True)
