"""Throughput of the tidemark-kafka source and sink (records/s), printed as a table.

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.

    .venv/bin/python bench/bench_kafka_source.py --records 200000 --partitions 2

Rows measured:
- ``read_range``: the plain-Python range reader (no Spark), every partition in turn;
- ``spark batch count``: ``spark.read.format("tidemark-kafka")...load().count()``;
- ``spark stream -> noop``: a streaming query (Trigger.AvailableNow) into the noop sink;
- ``spark stream -> sink``: the same query writing every record through the transactional sink.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.metadata import metadata_consumer
from tidemark.kafka.topics import TopicSpec
from tidemark.spark.offsets import OffsetRange, PartitionOffsets
from tidemark.spark.offset_planning import plan_latest
from tidemark.spark.arrow_range_reader import read_range
from tidemark.spark.datasource import register
from tidemark.spark.session import spark_session, temp_checkpoint_location


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex}",
                         "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000})
    producer.init_transactions(10)
    value = b"x" * value_bytes
    per_txn = 50_000
    for first in range(0, records, per_txn):
        producer.begin_transaction()
        for i in range(first, min(records, first + per_txn)):
            while True:
                try:
                    producer.produce(topic, key=str(i).encode(), value=value, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.commit_transaction(60)


def timed(label: str, expected: int, action: Callable[[], int]) -> tuple[str, int, float]:
    began = time.perf_counter()
    count = action()
    elapsed = time.perf_counter() - began
    if count != expected:
        raise SystemExit(f"{label}: counted {count}, expected {expected}")
    return label, count, elapsed


def run(bootstrap: str, records: int, partitions: int, value_bytes: int) -> list[tuple[str, int, float]]:
    topic, out = f"bench-src-{uuid.uuid4().hex[:8]}", f"bench-out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ensure_topics(admin, [TopicSpec(topic, partitions), TopicSpec(out, partitions)])
    produce(bootstrap, topic, records, partitions, value_bytes)
    client = {"bootstrap.servers": bootstrap}
    results = [timed("read_range (no Spark)", records, lambda: _plain_bounded(client, topic, partitions))]
    spark = spark_session()
    register(spark)
    try:
        reader = (spark.read.format("tidemark-kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic))
        reader.load().count()  # warm the Python workers once
        results.append(timed("spark batch count", records, lambda: reader.load().count()))
        stream = (spark.readStream.format("tidemark-kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").load())
        results.append(timed("spark stream -> noop", records, lambda: _stream(stream, "noop", {})))
        sink = {"kafka.bootstrap.servers": bootstrap, "topic": out,
                "commitMarkerTopic": f"bench-markers-{uuid.uuid4().hex[:8]}"}
        results.append(timed("spark stream -> tidemark sink", records,
                             lambda: _stream(stream.selectExpr("key", "value"), "tidemark-kafka", sink)))
    finally:
        spark.stop()
    return results


def _plain_bounded(client: dict, topic: str, partitions: int) -> int:
    consumer = metadata_consumer(client)
    try:
        end = plan_latest(consumer, [topic], PartitionOffsets())
    finally:
        consumer.close()
    return sum(batch.num_rows for p in range(partitions)
               for batch in read_range(client, OffsetRange(topic, p, 0, end[(topic, p)])))


def _stream(df, fmt: str, options: dict[str, str]) -> int:
    writer = df.writeStream.format(fmt).option("checkpointLocation", temp_checkpoint_location())
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    try:
        query.awaitTermination()
        if query.exception():
            raise query.exception()
        return sum(p["numInputRows"] for p in query.recentProgress)
    finally:
        query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as work:
        with kafka_or_embedded(work) as (bootstrap, broker):
            results = run(bootstrap, args.records, args.partitions, args.value_bytes)
    print(f"\n{args.records} records x {args.value_bytes} B values, {args.partitions} partitions, "
          f"broker {'external' if broker is None else 'embedded ' + broker.describe()}")
    print(f"{'path':<32}{'records':>10}{'seconds':>10}{'records/s':>14}")
    for label, count, seconds in results:
        print(f"{label:<32}{count:>10}{seconds:>10.2f}{count / seconds:>14,.0f}")


if __name__ == "__main__":
    main()
