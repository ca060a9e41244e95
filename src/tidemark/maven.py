"""Fetch Java artifacts and their runtime dependencies from Maven Central into a cache directory.

``fetch_classpath(name, coordinates, cache_dir)`` writes a throw-away POM naming ``coordinates``
(``group:artifact:version``), runs ``mvn dependency:copy-dependencies`` into
``cache_dir/<name>/libs`` once, and marks the folder complete; later calls return the folder at
once without running Maven. A file lock keeps two processes (a test session and a demo) from
fetching into the same folder at the same time. Maven is Debian's ``maven`` package
(``scripts/install-system-deps.sh`` installs it when ``mvn`` is missing).

Without a user's own ``~/.m2/settings.xml``, Maven runs with settings that send every repository
to Maven Central: POMs may name repositories of their own (Spark's parent POM names a Google
Cloud mirror), and a machine that reaches Central only must not fail on those.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from xml.sax.saxutils import escape

COMPLETE_MARKER = ".complete"
FETCH_TIMEOUT_S = 900.0
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
CENTRAL_ONLY_SETTINGS = f"""<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0">
  <mirrors><mirror><id>tidemark-central</id><mirrorOf>*</mirrorOf><url>{MAVEN_CENTRAL}</url></mirror></mirrors>
</settings>
"""


class MavenFetchError(RuntimeError):
    """Maven is missing or could not fetch the artifacts; the message says which and why."""


def default_cache_dir() -> Path:
    """``TIDEMARK_CACHE_DIR``, else ``$XDG_CACHE_HOME/tidemark``, else ``~/.cache/tidemark``."""
    explicit = os.environ.get("TIDEMARK_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidemark"


def _pom(coordinates: Sequence[str]) -> str:
    dependencies = []
    for coordinate in coordinates:
        group, artifact, version = coordinate.split(":")
        dependencies.append(
            "    <dependency>"
            f"<groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>"
            f"<version>{escape(version)}</version></dependency>"
        )
    body = "\n".join(dependencies)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>tidemark.cache</groupId><artifactId>classpath</artifactId><version>1</version>
  <dependencies>
{body}
  </dependencies>
</project>
"""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fetch_classpath(
    name: str,
    coordinates: Sequence[str],
    cache_dir: Path | None = None,
    *,
    progress: Callable[[str], None] = _say,
) -> tuple[Path, float]:
    """The folder holding every jar of ``coordinates`` and their runtime dependencies, and the
    seconds spent fetching (0.0 when the cache already had them)."""
    root = (cache_dir or default_cache_dir()) / name
    libs = root / "libs"
    if (root / COMPLETE_MARKER).exists():
        return libs, 0.0
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / COMPLETE_MARKER).exists():  # another process fetched while we waited
            return libs, 0.0
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenFetchError(
                "Maven (mvn) is not installed; install Debian's maven package "
                "(scripts/install-system-deps.sh does) and start again"
            )
        started = time.monotonic()
        progress(f"fetching {', '.join(coordinates)} with Maven into {libs} (first start only)")
        shutil.rmtree(libs, ignore_errors=True)
        (root / "pom.xml").write_text(_pom(coordinates))
        argv = [mvn, "-q", "-B", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
                f"-DoutputDirectory={libs}", "-DincludeScope=runtime"]
        if not (Path.home() / ".m2" / "settings.xml").exists():  # the user's own settings win
            (root / "settings.xml").write_text(CENTRAL_ONLY_SETTINGS)
            argv[1:1] = ["-s", str(root / "settings.xml")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise MavenFetchError(f"Maven did not finish fetching {name} in {FETCH_TIMEOUT_S:.0f}s") from None
        if done.returncode != 0 or not any(libs.glob("*.jar")):
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise MavenFetchError(f"Maven could not fetch {name} (exit {done.returncode}):\n{tail}")
        (root / COMPLETE_MARKER).write_text(" ".join(coordinates) + "\n")
        elapsed = time.monotonic() - started
        progress(f"fetched {len(list(libs.glob('*.jar')))} jars in {elapsed:.1f}s")
        return libs, elapsed
