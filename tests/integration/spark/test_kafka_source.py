"""The tidemark-kafka source in real Spark local mode against a real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from broker_gaps import tansu_gap
from kafka_test_helpers import create_topic, produce_transaction

from tidemark.protocol.messages import BARRIER_HEADER
from tidemark.spark.session import temp_checkpoint_location

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _stream(spark, bootstrap, topic, **options):
    """A stream of ``subscribe=topic``; pass ``topic=None`` and ``assign=...`` to assign partitions."""
    reader = spark.readStream.format("tidemark-kafka").option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _run_available_now(df, checkpoint, out_path, timeout_s=90):
    """Run ``df`` into parquet at ``out_path`` until all available data is processed; return progress."""
    query = (df.writeStream.format("parquet").option("path", out_path)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(timeout_s), "query did not finish"
        if query.exception():
            raise query.exception()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()


def _produce_batches(bootstrap, topic, partitions, transactions, per_txn, tag=""):
    produced = []
    for txn in range(transactions):
        records = [(i % partitions, f"k{i}".encode(), f"{tag}{txn}-{i}".encode(), None) for i in range(per_txn)]
        produce_transaction(bootstrap, topic, records)
        produced += [(p, v) for p, _, v, _ in records]
    return produced


def _read_out(spark, out_path):
    return spark.read.parquet(out_path).select("partition", "offset", "value").collect()


def test_reads_exactly_the_committed_records_of_every_partition(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("src")
    create_topic(kafka_bootstrap, topic, 3)
    produced = _produce_batches(kafka_bootstrap, topic, 3, transactions=3, per_txn=30)
    df = _stream(spark, kafka_bootstrap, topic, startingOffsets="earliest")
    _run_available_now(df, temp_checkpoint_location(root=tmp_path), str(tmp_path / "out"))
    rows = _read_out(spark, str(tmp_path / "out"))
    assert sorted((r["partition"], r["value"]) for r in rows) == sorted(produced)
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == 90


def test_admission_control_splits_the_backlog_and_a_restart_continues(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("adm")
    create_topic(kafka_bootstrap, topic, 3)
    produced = _produce_batches(kafka_bootstrap, topic, 3, transactions=3, per_txn=30)
    checkpoint, out = temp_checkpoint_location(root=tmp_path), str(tmp_path / "out")
    df = _stream(spark, kafka_bootstrap, topic, startingOffsets="earliest", maxRecordsPerTrigger=25)
    progress = _run_available_now(df, checkpoint, out)
    assert len(progress) >= 4 and all(p["numInputRows"] <= 25 for p in progress)
    assert sum(p["numInputRows"] for p in progress) == 90
    ends = [json.loads(json.dumps(p["sources"][0]["endOffset"])) for p in progress]
    starts = [json.loads(json.dumps(p["sources"][0]["startOffset"])) for p in progress[1:]]
    assert starts == ends[:-1]  # each batch starts where the previous one ended: no gap, no overlap

    produced += _produce_batches(kafka_bootstrap, topic, 3, transactions=1, per_txn=30, tag="after-")
    _run_available_now(df, checkpoint, out)  # same checkpoint: resumes from its offset log
    rows = _read_out(spark, out)
    assert sorted((r["partition"], r["value"]) for r in rows) == sorted(produced)
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows) == 120


def test_starting_offsets_latest_skips_the_existing_backlog(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("latest")
    create_topic(kafka_bootstrap, topic, 2)
    _produce_batches(kafka_bootstrap, topic, 2, transactions=1, per_txn=10, tag="old-")
    checkpoint, out = temp_checkpoint_location(root=tmp_path), str(tmp_path / "out")
    df = _stream(spark, kafka_bootstrap, topic, startingOffsets="latest")
    assert _run_available_now(df, checkpoint, out) == []
    fresh = _produce_batches(kafka_bootstrap, topic, 2, transactions=1, per_txn=10, tag="new-")
    _run_available_now(df, checkpoint, out)
    assert sorted((r["partition"], r["value"]) for r in _read_out(spark, out)) == sorted(fresh)


def test_batch_read_of_json_offset_ranges(spark, kafka_bootstrap, unique_name):
    topic = unique_name("json")
    create_topic(kafka_bootstrap, topic, 2)
    produce_transaction(kafka_bootstrap, topic, [(0, None, f"a{i}".encode(), None) for i in range(5)])  # 0-4
    produce_transaction(kafka_bootstrap, topic, [(1, None, f"b{i}".encode(), None) for i in range(5)])  # 0-4
    df = (spark.read.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", json.dumps({topic: {"0": 2}}))  # partition 1: earliest
          .option("endingOffsets", json.dumps({topic: {"0": 4, "1": -1}})).load())
    values = sorted(r["value"] for r in df.select("value").collect())
    assert values == sorted([b"a2", b"a3"] + [f"b{i}".encode() for i in range(5)])


def test_headers_round_trip_including_a_barrier(spark, kafka_bootstrap, unique_name):
    topic = unique_name("hdr")
    create_topic(kafka_bootstrap, topic, 1)
    barrier = [(BARRIER_HEADER, b"\x02checkpoint-7"), ("trace", b"t1"), ("trace", b"t2")]
    produce_transaction(kafka_bootstrap, topic, [(0, b"k", b"data", None), (0, None, b"", barrier)])
    df = (spark.read.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", topic).load())
    rows = df.orderBy("offset").collect()
    assert [r["value"] for r in rows] == [b"data", b""]
    assert rows[0]["headers"] is None
    assert [(h["key"], bytes(h["value"])) for h in rows[1]["headers"]] == barrier
    flagged = df.where(f"exists(headers, h -> h.key = '{BARRIER_HEADER}')").count()
    assert flagged == 1


@pytest.mark.parametrize(
    ("option", "value"),
    [("maxRecordsPerTrigger", "-5"), ("startingOffsets", "tomorrow"), ("isolationLevel", "dirty")],
)
def test_a_bad_option_fails_the_query_naming_the_option(spark, kafka_bootstrap, unique_name, tmp_path, option, value):
    topic = unique_name("bad")
    create_topic(kafka_bootstrap, topic, 1)
    df = _stream(spark, kafka_bootstrap, topic, **{option: value})
    with pytest.raises(Exception, match=f"tidemark-kafka option '{option}'"):
        _run_available_now(df, temp_checkpoint_location(root=tmp_path), str(tmp_path / "out"), timeout_s=60)


def test_a_missing_topic_fails_the_query_naming_it(spark, kafka_bootstrap, unique_name, tmp_path):
    missing = unique_name("nowhere")
    df = _stream(spark, kafka_bootstrap, missing, startingOffsets="earliest")
    with pytest.raises(Exception, match=f"topic\\(s\\) not found: \\['{missing}'\\]"):
        _run_available_now(df, temp_checkpoint_location(root=tmp_path), str(tmp_path / "out"), timeout_s=60)


@tansu_gap("aborted-transaction filtering for read_committed readers")
def test_aborted_transactions_between_committed_ones_are_not_read(
    spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("abort")
    create_topic(kafka_bootstrap, topic, 2)
    committed = []
    for txn in range(3):
        records = [(i % 2, None, f"c{txn}-{i}".encode(), None) for i in range(6)]
        produce_transaction(kafka_bootstrap, topic, records)
        committed += [(p, v) for p, _, v, _ in records]
        produce_transaction(kafka_bootstrap, topic, [(i % 2, None, b"aborted", None) for i in range(4)], commit=False)
    df = _stream(spark, kafka_bootstrap, topic, startingOffsets="earliest", maxRecordsPerTrigger=7)
    _run_available_now(df, temp_checkpoint_location(root=tmp_path), str(tmp_path / "out"))
    assert sorted((r["partition"], r["value"]) for r in _read_out(spark, str(tmp_path / "out"))) == sorted(committed)


def _checkpointed_source_offsets(checkpoint: str) -> list[dict]:
    """The source offsets of every batch in the query's offset log (line 3 of ``offsets/N``)."""
    logs = sorted(Path(checkpoint, "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    return [json.loads(f.read_text().splitlines()[2]) for f in logs]


def test_assign_reads_only_the_assigned_partitions_in_a_stream_and_a_batch(
        spark, kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("assign")
    create_topic(kafka_bootstrap, topic, 4)
    produced = _produce_batches(kafka_bootstrap, topic, 4, transactions=2, per_txn=40)
    wanted = sorted((p, v) for p, v in produced if p in (1, 3))
    assign = json.dumps({topic: [1, 3]})

    checkpoint, out = temp_checkpoint_location(root=tmp_path), str(tmp_path / "out")
    df = _stream(spark, kafka_bootstrap, None, assign=assign, startingOffsets="earliest", maxRecordsPerTrigger=15)
    progress = _run_available_now(df, checkpoint, out)
    streamed = _read_out(spark, out)
    assert sorted((r["partition"], r["value"]) for r in streamed) == wanted
    assert sum(p["numInputRows"] for p in progress) == len(wanted) == 40
    logged = _checkpointed_source_offsets(checkpoint)
    assert len(logged) >= 3 and all(set(doc) == {topic} and set(doc[topic]) == {"1", "3"} for doc in logged)

    batch = (spark.read.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
             .option("assign", assign).option("startingOffsets", json.dumps({topic: {"3": 5}})).load())
    rows = batch.select("partition", "offset", "value").collect()
    expected = sorted((r["partition"], r["value"]) for r in streamed if r["partition"] == 1 or r["offset"] >= 5)
    assert len(expected) == 35  # partition 3 holds offsets 0-9, a commit marker, then 11-20
    assert sorted((r["partition"], r["value"]) for r in rows) == expected


def test_an_assigned_partition_that_does_not_exist_fails_naming_it(spark, kafka_bootstrap, unique_name):
    topic = unique_name("assign-missing")
    create_topic(kafka_bootstrap, topic, 4)
    df = (spark.read.format("tidemark-kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("assign", json.dumps({topic: [1, 4, 7]})).load())
    with pytest.raises(Exception, match=f"option 'assign': partition\\(s\\) not found: \\['{topic}/4', '{topic}/7'\\]"):
        df.collect()
