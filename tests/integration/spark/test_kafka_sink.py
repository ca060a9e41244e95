"""The tidemark-kafka sink in real Spark local mode: exactly once across retries and restarts."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from broker_gaps import tansu_gap
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka_test_helpers import committed_values, create_topic, produce_transaction

from tidemark.protocol.messages import BARRIER_HEADER
from tidemark.kafka.commit_markers import CommitMarker, find_commit
from tidemark.spark.datasource import TidemarkKafkaDataSource
from tidemark.spark.kafka_sink import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    SinkColumnError,
    SinkCommitMessage,
    SinkSlot,
    write_partition,
)
from tidemark.spark.options import InvalidOptionError, KafkaSinkOptions
from tidemark.spark.session import temp_checkpoint_location

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SINK_SCHEMA = "key binary, value binary"


def _writer(bootstrap: str, topic: str, markers: str, schema: str = SINK_SCHEMA):
    """The stream writer Spark would build (parsing the schema needs a running session: tests
    calling this take the ``spark`` fixture)."""
    from pyspark.sql.types import _parse_datatype_string

    source = TidemarkKafkaDataSource({"kafka.bootstrap.servers": bootstrap, "topic": topic,
                                      "commitMarkerTopic": markers})
    return source.streamWriter(_parse_datatype_string(schema), overwrite=False)


def _rows(tag: str, count: int) -> pa.RecordBatch:
    return pa.record_batch({"key": pa.array([f"k{i}".encode() for i in range(count)], pa.binary()),
                            "value": pa.array([f"{tag}-{i}".encode() for i in range(count)], pa.binary())})


def _markers(bootstrap: str, topic: str) -> list[CommitMarker]:
    return [CommitMarker.decode(v) for v in committed_values(bootstrap, topic, 1)]


def test_a_retried_task_writes_its_batch_partition_once(spark, kafka_bootstrap, unique_name):
    out, markers = unique_name("out"), unique_name("markers")
    create_topic(kafka_bootstrap, out, 2)
    writer = _writer(kafka_bootstrap, out, markers)
    query_id = str(uuid.uuid4())

    def task(_):  # runs on an executor: two attempts of the same (query, batch, partition)
        import pyarrow

        def rows(tag, count):  # local: executors cannot import this test module
            return pyarrow.record_batch({"key": [f"k{i}".encode() for i in range(count)],
                                         "value": [f"{tag}-{i}".encode() for i in range(count)]})

        first = writer.write(iter([rows("a", 15), rows("b", 5)]))
        second = writer.write(iter([rows("a", 15), rows("b", 5)]))
        return [json.dumps([first.records, first.skipped, second.records, second.skipped, first.transactional_id])]

    context = spark.sparkContext
    context.setLocalProperty(QUERY_ID_PROPERTY, query_id)
    try:
        results = []
        for batch_id in (7, 8):
            context.setLocalProperty(BATCH_ID_PROPERTY, str(batch_id))
            results.append(json.loads(context.parallelize([0], 1).mapPartitions(task).collect()[0]))
    finally:
        context.setLocalProperty(BATCH_ID_PROPERTY, None)
        context.setLocalProperty(QUERY_ID_PROPERTY, None)

    assert [r[:4] for r in results] == [[20, False, 0, True], [20, False, 0, True]]
    assert results[0][4] == f"tidemark-sink.{query_id}.7.0"
    values = committed_values(kafka_bootstrap, out, 2)
    assert sorted(values) == sorted(2 * [f"a-{i}".encode() for i in range(15)] + 2 * [f"b-{i}".encode() for i in range(5)])
    assert [(m.batch_id, m.partition, m.records) for m in _markers(kafka_bootstrap, markers)] == [(7, 0, 20), (8, 0, 20)]
    writer.commit([SinkCommitMessage(query_id, 8, 0, "t", 0, True), None], 8)
    assert writer.outcomes[-1].skipped_partitions == (0,) and writer.outcomes[-1].failed_partitions == (1,)


def test_write_partition_needs_a_topic_and_a_value_column(spark, kafka_bootstrap, unique_name):
    with pytest.raises(InvalidOptionError, match="'topic'"):
        _writer(kafka_bootstrap, "", unique_name("m"), "key binary, value binary")
    with pytest.raises(SinkColumnError, match="'value' column"):
        _writer(kafka_bootstrap, "t", unique_name("m"), "key binary")


@tansu_gap("aborted-transaction filtering for read_committed readers")
def test_a_failed_attempt_and_a_dead_task_leave_nothing_visible(spark, kafka_bootstrap, unique_name):
    out, markers = unique_name("out"), unique_name("markers")
    create_topic(kafka_bootstrap, out, 1)
    writer = _writer(kafka_bootstrap, out, markers)
    options = KafkaSinkOptions.parse({"kafka.bootstrap.servers": kafka_bootstrap, "topic": out,
                                      "commitMarkerTopic": markers})
    query_id = str(uuid.uuid4())

    def failing():
        yield _rows("lost", 10)
        raise RuntimeError("executor lost mid-write")

    with pytest.raises(RuntimeError, match="executor lost"):
        write_partition(options, SinkSlot(query_id, 3, 0), failing())
    dead = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": SinkSlot(query_id, 3, 1)
                    .transactional_id("tidemark-sink")})
    dead.init_transactions(10)
    dead.begin_transaction()
    dead.produce(out, value=b"dead-task", partition=0)
    dead.flush(10)  # left open, as by a killed executor
    writer.abort([None, None], 3)  # query id unknown to the driver: the open transaction times out
    writer.abort([None, None, SinkCommitMessage(query_id, 3, 2, "t", 0, False)], 3)  # fences slots 0 and 1
    assert writer.outcomes[-1].failed_partitions == (0, 1) and not writer.outcomes[-1].committed
    assert committed_values(kafka_bootstrap, out, 1) == []
    assert find_commit(options.client, markers, query_id, 3, 0) is None
    retried = write_partition(options, SinkSlot(query_id, 3, 0), iter([_rows("kept", 4)]))
    assert (retried.records, retried.skipped) == (4, False)
    assert committed_values(kafka_bootstrap, out, 1) == [f"kept-{i}".encode() for i in range(4)]


def _latest_commit_file(checkpoint: str) -> Path:
    commits = [p for p in (Path(checkpoint) / "commits").iterdir() if p.name.isdigit()]
    return max(commits, key=lambda p: int(p.name))


def test_a_restarted_query_rewrites_nothing_and_keeps_headers(spark, kafka_bootstrap, unique_name, tmp_path):
    source, out, markers = unique_name("src"), unique_name("out"), unique_name("markers")
    create_topic(kafka_bootstrap, source, 3)
    create_topic(kafka_bootstrap, out, 3)
    barrier = [(BARRIER_HEADER, b"\x01ckpt-1")]
    records = [(i % 3, f"k{i}".encode(), f"v{i}".encode(), barrier if i == 59 else None) for i in range(60)]
    for chunk in range(3):
        produce_transaction(kafka_bootstrap, source, records[chunk * 20:(chunk + 1) * 20])
    checkpoint = temp_checkpoint_location(root=tmp_path)
    df = (spark.readStream.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").option("maxRecordsPerTrigger", "25")
          .load().selectExpr("key", "value", "headers", "partition"))

    def run():
        query = (df.writeStream.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
                 .option("topic", out).option("commitMarkerTopic", markers)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        try:
            assert query.awaitTermination(240), f"still running: {query.status} {query.lastProgress}"
            assert query.exception() is None
            return [p for p in query.recentProgress if p["numInputRows"] > 0]
        finally:
            query.stop()

    first = run()
    assert len(first) >= 3
    last = _latest_commit_file(checkpoint)
    last.unlink()  # as if the driver died after the sink committed Kafka but before Spark's commit log
    (last.parent / f".{last.name}.crc").unlink(missing_ok=True)
    second = run()
    assert [p["batchId"] for p in second] == [int(last.name)] and second[0]["numInputRows"] > 0

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    seen = {}
    try:
        consumer.assign([TopicPartition(out, p, 0) for p in range(3)])
        eof = set()
        for _ in range(100):
            for message in consumer.consume(500, 0.2):
                if message.error():
                    eof.add(message.partition())
                    continue
                assert message.value() not in seen, f"duplicate {message.value()!r}"
                seen[message.value()] = (message.partition(), message.headers())
            if len(eof) == 3:
                break
    finally:
        consumer.close()
    assert sorted(seen) == sorted(v for _, _, v, _ in records)
    assert all(seen[v][0] == p for p, _, v, _ in records)  # the partition column routed every row
    assert seen[b"v59"][1] == barrier
    marker_slots = [(m.batch_id, m.partition) for m in _markers(kafka_bootstrap, markers)]
    assert len(marker_slots) == len(set(marker_slots))
