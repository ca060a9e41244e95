"""Spark's own Kafka connector (``spark-sql-kafka-0-10``): its jars, fetched from Maven Central.

``connector_jars()`` fetches the connector and its runtime dependencies once per machine into the
cache (:func:`tidemark.maven.fetch_classpath`) and returns the jars Spark does not ship
itself (the connector, Spark's Kafka token provider, ``kafka-clients`` and ``commons-pool2``): a
jar whose artifact PySpark already has stays out, so the session keeps PySpark's own version.

The version: PySpark 4.3.0 is on PyPI, but Spark 4.3.0's artifacts are not on Maven Central (its
``spark-sql-kafka-0-10_2.13`` 4.3.0 answers 404; 4.2.0 is the newest published), so the
connector of Spark 4.2.0 runs on Spark 4.3.0. The connector uses Spark's DataSource V2 and
offset APIs only; the integration tests (``tests/integration/spark/test_stage_sources.py``) run
it against a real broker on this PySpark, with transactions, headers, assigned partitions and
restored positions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyspark

from tidemark.maven import fetch_classpath

SCALA_VERSION = "2.13"
CONNECTOR_VERSION = "4.2.0"
ARTIFACTS = (f"org.apache.spark:spark-sql-kafka-0-10_{SCALA_VERSION}:{CONNECTOR_VERSION}",)
_ARTIFACT = re.compile(r"^(?P<name>.+?)-\d+(?:\.\d+)+.*\.jar$")


def artifact_name(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients`` (the name without its version)."""
    match = _ARTIFACT.match(jar)
    return match.group("name") if match else jar.removesuffix(".jar")


def spark_jars_dir() -> Path:
    return Path(pyspark.__file__).parent / "jars"


def missing_jars(fetched: list[Path], shipped: list[str]) -> list[Path]:
    """The fetched jars whose artifact the Spark distribution does not already ship."""
    have = {artifact_name(name) for name in shipped}
    return sorted(jar for jar in fetched if artifact_name(jar.name) not in have)


def connector_jars(cache_dir: Path | None = None) -> list[Path]:
    """The jars to add to a session (``spark.jars``) so that ``format("kafka")`` works; fetched
    with Maven at the first call on a machine (raises ``MavenFetchError`` naming why not)."""
    libs, _ = fetch_classpath(f"spark-sql-kafka-{CONNECTOR_VERSION}", ARTIFACTS, cache_dir)
    return missing_jars(sorted(libs.glob("*.jar")), [p.name for p in spark_jars_dir().glob("*.jar")])
