"""A stage's two Kafka sources side by side: Spark's own connector (``kafka``) and Tidemark's
Python data source (``tidemark-kafka``), as a stage worker uses them (``tidemark.spark.stage_source``).

Both read the same transactional input topic, read_committed, in one warm SparkSession (the
session a worker or a warm standby has), through a streaming query whose ``foreachBatch`` turns
each batch into records as a stage does (``toArrow`` + ``records_of``) and drops them. Rounds
alternate the two sources. Per round and source:

    first batch   seconds from ``start()`` of the query to its first batch in ``foreachBatch``
                  (what a restored stage waits before it processes again)
    records/s     all records from ``start()`` to the last one handed to ``foreachBatch``

    .venv/bin/python bench/bench_stage_sources.py --records 200000 --rounds 3

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from typing import Any

from bench_kafka_source import produce
from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.runtime.worker.query import session_options
from tidemark.runtime.job.records import records_of
from tidemark.spark.session import spark_session, query_checkpoint_location
from tidemark.spark.stage_source import ReadSelection, StageSource, stage_source

KINDS = ("kafka", "tidemark-kafka")


def read_all(spark: Any, source: StageSource, topic: str, records: int, batch: int) -> tuple[float, float]:
    """(seconds to the first batch, records/s from start to the last record)."""
    seen = [0]
    first: list[float] = []
    done = threading.Event()

    def on_batch(frame: Any, batch_id: int) -> None:
        rows = sum(1 for _ in records_of(frame.toArrow()))
        if rows and not first:
            first.append(time.monotonic())
        seen[0] += rows
        if seen[0] >= records:
            done.set()

    options = source.options(ReadSelection((topic,), max_records=batch))
    source.prepare(spark)
    with query_checkpoint_location(f"bench-{source.format}") as location:
        started = time.monotonic()
        query = (spark.readStream.format(source.format).options(**options).load().writeStream
                 .foreachBatch(on_batch).option("checkpointLocation", location)
                 .trigger(processingTime="200 milliseconds").start())
        try:
            if not done.wait(600):
                raise SystemExit(f"{source.format}: read {seen[0]} of {records} records in 600 s")
            ended = time.monotonic()
        finally:
            query.stop()
    return first[0] - started, records / (ended - started)


def _row(label: str, values: list[float], fmt: str) -> str:
    return (f"{label:<34}" + "".join(f"{format(v, fmt):>12}" for v in
                                     (min(values), statistics.median(values), max(values))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=20_000, help="records (offsets) per micro-batch at most")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {k: {"first": [], "rate": []} for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as work:
        with kafka_or_embedded(work) as (bootstrap, broker):
            topic = f"bench-stage-src-{uuid.uuid4().hex[:8]}"
            ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(topic, args.partitions)])
            produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
            sources = {kind: stage_source(TidemarkSettings(bootstrap_servers=bootstrap,
                                                           spark={"source": kind}), bootstrap) for kind in KINDS}
            spark = spark_session(session_options(TidemarkSettings(), "bench-stage-sources", sources["kafka"]))
            try:
                read_all(spark, sources["tidemark-kafka"], topic, min(args.records, 1000), 1000)  # warm both,
                read_all(spark, sources["kafka"], topic, min(args.records, 1000), 1000)  # as a standby is
                for round_ in range(args.rounds):
                    for kind in KINDS if round_ % 2 == 0 else reversed(KINDS):
                        first, rate = read_all(spark, sources[kind], topic, args.records, args.batch)
                        results[kind]["first"].append(first)
                        results[kind]["rate"].append(rate)
                        print(f"round {round_ + 1} {kind:<15} first batch {first:6.2f} s   {rate:>10,.0f} records/s",
                              flush=True)
            finally:
                spark.stop()
    print(f"\n{args.records} records x {args.value_bytes} B, {args.partitions} partitions, batches of "
          f"{args.batch}, {args.rounds} rounds, broker {'external' if broker is None else broker.describe()}")
    print(f"{'':<34}{'min':>12}{'median':>12}{'max':>12}")
    for kind in KINDS:
        print(_row(f"{kind}: first batch (s)", results[kind]["first"], ".2f"))
        print(_row(f"{kind}: records/s", results[kind]["rate"], ",.0f"))
    ratio = statistics.median(results["kafka"]["rate"]) / statistics.median(results["tidemark-kafka"]["rate"])
    first = statistics.median(results["tidemark-kafka"]["first"]) / statistics.median(results["kafka"]["first"])
    print(f"\nconnector / Python source, medians: records/s x{ratio:.2f}; first batch {first:.1f}x sooner")


if __name__ == "__main__":
    main()
