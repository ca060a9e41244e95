"""Contract of a stage's Kafka source (``tidemark.spark.stage_source``), over both sources.

Spark's own connector (``kafka``) and Tidemark's Python data source (``tidemark-kafka``) must give
a stage the same records for the same :class:`ReadSelection`: committed records only (an aborted
transaction's records never), headers intact, subscribed or assigned partitions, restored
positions with the other partitions from the earliest. Read through a real streaming query in
real Spark against the session's broker, and turned into records by ``records_of`` as a stage
worker does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from broker_gaps import tansu_gap
from kafka_test_helpers import create_topic, produce_transaction

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import java_security, kafka_security
from tidemark.runtime.job.records import EPOCH_HEADER, TASK_HEADER, records_of
from tidemark.spark.kafka_connector import connector_jars
from tidemark.spark.session import query_checkpoint_location
from tidemark.spark.stage_source import ReadSelection, SparkKafkaSource, StageSource, TidemarkKafkaSource

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SOURCES = ("kafka", "tidemark-kafka")


def _source(kind: str, bootstrap: str) -> StageSource:
    if kind == "tidemark-kafka":
        return TidemarkKafkaSource({"bootstrap.servers": bootstrap})
    security = java_security(kafka_security(TidemarkSettings()))
    return SparkKafkaSource(bootstrap, security, [str(jar) for jar in connector_jars()])


def _read(spark, source: StageSource, selection: ReadSelection, expect: int, timeout_s: float = 90.0,
          settle_s: float = 2.0) -> list[tuple]:
    """The records a stage's query reads: waits for ``expect`` of them, then ``settle_s`` more."""
    seen: list[tuple] = []
    lock = threading.Lock()

    def on_batch(frame, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, r.key, r.value, r.epoch, r.task, r.timestamp_ms > 0)
                for r in records_of(frame.toArrow())]
        with lock:
            seen.extend(rows)

    with query_checkpoint_location(f"contract-{source.format}") as location:
        query = (spark.readStream.format(source.format).options(**source.options(selection)).load()
                 .writeStream.foreachBatch(on_batch).option("checkpointLocation", location)
                 .trigger(processingTime="200 milliseconds").start())
        try:
            deadline = time.monotonic() + timeout_s
            while len(seen) < expect and time.monotonic() < deadline:
                assert query.isActive, query.exception()
                time.sleep(0.1)
            time.sleep(settle_s)  # nothing more may arrive
        finally:
            query.stop()
    return sorted(seen)


def _fill(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """Three partitions: two committed transactions (some records with channel headers), one
    aborted between them; returns the committed ``(partition, key, value)``."""
    committed = []
    for txn, commit in ((0, True), (1, False), (2, True)):
        records = [(i % 3, f"k{i}".encode(), f"t{txn}-{i}".encode(),
                    [(EPOCH_HEADER, b"7"), (TASK_HEADER, b"op#1")] if i % 5 == 0 else None) for i in range(30)]
        produce_transaction(bootstrap, topic, records, commit=commit)
        committed += [(p, k, v) for p, k, v, _ in records] if commit else []
    return committed


@pytest.mark.parametrize("kind", SOURCES)
@tansu_gap("aborted transactions hidden from read_committed readers")
def test_a_source_reads_every_committed_record_once_and_no_aborted_one(spark, kafka_bootstrap, unique_name,
                                                                         kind) -> None:
    topic = unique_name("stage-src")
    create_topic(kafka_bootstrap, topic, 3)
    committed = _fill(kafka_bootstrap, topic)
    rows = _read(spark, _source(kind, kafka_bootstrap), ReadSelection((topic,), max_records=7),
                 expect=len(committed))
    assert sorted((p, k, v) for _, p, _, k, v, *_ in rows) == sorted(committed)
    assert len({(p, o) for _, p, o, *_ in rows}) == len(rows), "an offset was read twice"
    with_headers = [r for r in rows if r[5] is not None]
    assert len(with_headers) == 12 and all(r[5] == 7 and r[6] == "op#1" for r in with_headers)
    assert all(r[7] for r in rows), "every record has its Kafka timestamp"


@pytest.mark.parametrize("kind", SOURCES)
def test_assigned_partitions_start_at_restored_positions_and_the_others_at_the_earliest(
        spark, kafka_bootstrap, unique_name, kind) -> None:
    topic = unique_name("stage-src-assign")
    create_topic(kafka_bootstrap, topic, 3)
    produce_transaction(kafka_bootstrap, topic, [(i % 3, None, f"v{i}".encode(), None) for i in range(30)])
    selection = ReadSelection((topic,), ((topic, 0), (topic, 2)), assigned=True, positions={(topic, 0): 4})
    rows = _read(spark, _source(kind, kafka_bootstrap), selection, expect=6 + 10)
    assert {p for _, p, *_ in rows} == {0, 2}, "only the assigned partitions"
    assert sorted(o for _, p, o, *_ in rows if p == 0) == list(range(4, 10))
    assert len([r for r in rows if r[1] == 2]) == 10


def test_both_sources_give_a_stage_the_same_records(spark, kafka_bootstrap, unique_name) -> None:
    topic = unique_name("stage-src-same")
    create_topic(kafka_bootstrap, topic, 3)
    produce_transaction(kafka_bootstrap, topic, [(i % 3, f"k{i}".encode(), f"v{i}".encode(),
                                                  [(EPOCH_HEADER, b"3"), (TASK_HEADER, b"t#0")] if i % 2 else None)
                                                 for i in range(40)])
    selection = ReadSelection((topic,), ((topic, 0), (topic, 1), (topic, 2)), positions={(topic, 1): 5})
    read = {kind: _read(spark, _source(kind, kafka_bootstrap), selection, expect=35, settle_s=1.0)
            for kind in SOURCES}
    assert read["kafka"] == read["tidemark-kafka"]
    assert len(read["kafka"]) == 35


PREPARED_SESSION = """
import sys
from tidemark.spark.session import SessionOptions, spark_session
from tidemark.spark.stage_source import SparkKafkaSource, TidemarkKafkaSource
kind, bootstrap, jars = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
source = (TidemarkKafkaSource({"bootstrap.servers": bootstrap}) if kind == "tidemark-kafka"
          else SparkKafkaSource(bootstrap, {}, jars))
spark = spark_session(SessionOptions(extra_conf=source.session_conf()))
reader = lambda: spark.readStream.format(source.format).option("kafka.bootstrap.servers", bootstrap).option("subscribe", "t").load()
try:
    reader()
    print("readable before prepare")
except Exception:
    print("not readable before prepare")
source.prepare(spark)
print("columns", ",".join(reader().columns))
spark.stop()
"""


@pytest.mark.parametrize("kind", SOURCES)
def test_a_new_session_reads_a_source_once_the_source_prepared_it(kind, kafka_bootstrap) -> None:
    """A worker's session has only the source's ``session_conf`` (the connector's jars); the
    Python data source is registered by ``prepare``, not by every session (it costs 0.9 s)."""
    jars = ",".join(str(jar) for jar in connector_jars())
    result = subprocess.run([sys.executable, "-c", PREPARED_SESSION, kind, kafka_bootstrap, jars],
                            capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0] == ("readable before prepare" if kind == "kafka" else "not readable before prepare"), lines
    assert {"key", "value", "topic", "partition", "offset"} <= set(lines[1].removeprefix("columns ").split(",")), lines
