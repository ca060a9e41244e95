"""Poison records never kill a job: every class goes to the dead-letter topic with its origin,
the running two-stage job never fails over, and its read_committed output stays exact."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from pipeline_support import TOP_URLS, dead_letters, pipeline, topics_for, verify_two_stage
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.local.pipeline import InputFeeder, wait_for

pytestmark = pytest.mark.timeout(600)

POISON_URL = "/poison"
# malformed (never closed), within the broker's 1 MiB message limit, but its dead letter would not be
NEAR_ONE_MB = b'{"ts": 1700000000000, "url": "/' + b"x" * 1_040_000


def _valid(url: str) -> bytes:
    return json.dumps({"ts": 1_700_000_000_000, "ip": "10.0.0.1", "method": "GET", "url": url, "status": 200,
                       "bytes": 1}).encode()


def _produce(bootstrap: str, topic: str, records: list[dict]) -> dict[str, tuple[str, int, int]]:
    """Write each ``{"name", "value", key?, headers?}``; return its (topic, partition, offset) by name."""
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}, **{"message.max.bytes": 1_048_576}))
    origins: dict[str, tuple[str, int, int]] = {}
    for record in records:
        def delivered(err, msg, name=record["name"]):  # noqa: ANN001
            assert err is None, err
            origins[name] = (msg.topic(), msg.partition(), msg.offset())
        producer.produce(topic, value=record["value"], key=record.get("key"), headers=record.get("headers"),
                         partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    return origins


def test_every_poison_record_class_is_dead_lettered_and_the_job_keeps_running(tmp_path, kafka_bootstrap,
                                                                               unique_name):
    topics = topics_for(unique_name)
    dead_letter_topic = TopicNames(unique_name("tm")).dead_letters
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        pipe.create_topic(topics.channel, 4)
        # the poison records carry an old event time: processed anyway, so the user exception is reached
        job = pipe.start_job(TOP_URLS, topics.args(fail_on_url=POISON_URL, late_records="process"), max_restarts=0)
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1600, chunk=200, pause_s=1.0).start()
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 1, 240, "a first checkpoint")
        garbage = [("tidemark-epoch", b"\xff\xfe not a number"), ("tidemark-task", b"\xed\xa0\x80"),
                   ("tidemark-barrier", b"\x00\x00\x00\x00\x01garbage")]
        origins = _produce(kafka_bootstrap, topics.input, [
            {"name": "near-1MB", "value": NEAR_ONE_MB},
            {"name": "lone-surrogates", "key": "/\ud800".encode("utf-8", "surrogatepass"),
             "value": b'{"ts": 1700000000000, "url": "/\\ud800cart", "status": 200}'},
            {"name": "garbage-headers", "value": _valid("/cart"), "headers": garbage},
            {"name": "user-exception", "value": _valid(POISON_URL)},
        ])
        origins |= _produce(kafka_bootstrap, topics.channel, [  # a valid count, but not written by the job
            {"name": "channel-garbage-headers", "headers": garbage[:1] + [("tidemark-task", b"minute_counts#0")],
             "value": json.dumps({"minute": 1_700_000_000_000 // 60_000 * 60_000, "url": "/cart", "hits": 10**6}
                                 ).encode()},
            {"name": "channel-no-headers", "value": b'{"minute": 0, "url": "/cart", "hits": 1}'},
        ])
        records = feeder.join(timeout_s=300)
        letters = dead_letters(kafka_bootstrap, dead_letter_topic, set(origins.values()), timeout_s=120)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=240)
        failures = job.events("worker failed")
        attempts = job.events("starting attempt")
        running = job.process.poll() is None
        job.stop()
    by_origin = {(d.origin_topic, d.origin_partition, d.origin_offset): d for d in letters}
    found = {name: by_origin.get(origin) for name, origin in origins.items()}
    assert all(found.values()), {name: letter is not None for name, letter in found.items()}
    assert found["near-1MB"].original_sizes == {"value": len(NEAR_ONE_MB)}
    assert NEAR_ONE_MB.startswith(found["near-1MB"].value) and found["near-1MB"].error_type == "malformed-input"
    assert found["lone-surrogates"].error_type == "malformed-input"
    assert found["lone-surrogates"].key == "/\ud800".encode("utf-8", "surrogatepass")
    assert found["garbage-headers"].error_type == "malformed-headers"
    assert found["garbage-headers"].headers["tidemark-epoch"] == b"\xff\xfe not a number"
    assert found["user-exception"].error_type == "function-failed"
    assert POISON_URL in found["user-exception"].error_message
    assert found["channel-garbage-headers"].error_type == "malformed-headers"
    assert found["channel-no-headers"].error_type == "malformed-headers"
    assert {d.service for d in found.values()} == {"worker"}
    assert failures == [] and len(attempts) == 1 and running
    assert verdict.exactly_once, verdict
