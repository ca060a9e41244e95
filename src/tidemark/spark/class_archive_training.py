"""The training run of the JVM class archive (:mod:`tidemark.spark.class_archive` starts it as a
child process): a local session that dumps its classes when its JVM exits, running the kinds of
work a stage worker runs, so that their classes are in the archive.

    python -m tidemark.spark.class_archive_training OUT [--jars a.jar,b.jar] [--bootstrap host:port]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from tidemark.spark.class_archive import BUILD_TIMEOUT_S, QUIET
from tidemark.spark.session import SessionOptions, spark_session

TRAINING_BATCHES = 3


def train(out: str, jars: list[str], bootstrap: str | None) -> None:
    """Start a session that dumps its classes at exit and run a stage worker's kinds of work."""
    from pyspark import SparkContext

    extra = {"spark.jars": ",".join(jars)} if jars else {}
    spark = spark_session(SessionOptions(app_name="tidemark-class-archive", class_archive=False,
                                         java_options=f"-XX:ArchiveClassesAtExit={out} {QUIET}",
                                         extra_conf=extra))
    spark.range(1000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS v").groupBy("k").count().toArrow()
    streams = [spark.readStream.format("rate").option("rowsPerSecond", "100").load()]
    if jars and bootstrap:
        streams.append(spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                       .option("subscribePattern", "tidemark-class-archive-none-.*")
                       .option("kafka.isolation.level", "read_committed").option("includeHeaders", "true").load())
    for stream in streams:
        with tempfile.TemporaryDirectory(prefix="tidemark-class-archive-") as location:
            query = (stream.writeStream.foreachBatch(lambda frame, _: frame.toArrow())
                     .option("checkpointLocation", location).trigger(processingTime="200 milliseconds").start())
            deadline = time.monotonic() + 60
            while len(query.recentProgress) < TRAINING_BATCHES and time.monotonic() < deadline and query.isActive:
                time.sleep(0.2)
            query.stop()
    spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM exits when its stdin closes, and writes the archive as it does
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=BUILD_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark.spark.class_archive_training")
    parser.add_argument("out", help="the archive file the JVM writes as it exits")
    parser.add_argument("--jars", default="", help="comma-separated spark.jars of the session")
    parser.add_argument("--bootstrap", help="a broker the training reads from with Spark's Kafka connector")
    args = parser.parse_args(argv)
    train(args.out, [jar for jar in args.jars.split(",") if jar], args.bootstrap)
    return 0


if __name__ == "__main__":
    sys.exit(main())
