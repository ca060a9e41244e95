"""A stage whose input Spark prepares first (``SparkStep``, issue #38): the count-per-URL job with
``from_json`` on the record schema and a key column; records it cannot parse are dead-lettered
with their original bytes and origin, and a savepoint of the job restores into the same job without
the step (the step holds no state). The worked example joins a static CSV table and restores into
a changed step. Exactly once throughout. (The two-stage job with the step, SIGKILLed at every fault
point: ``test_exactly_once.py``.)"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from pipeline_support import URL_COUNTS, dead_letters, pipeline, topics_for, verify_single_stage
from tidemark.examples.generator import URLS, generate, produce
from tidemark.examples.owner_errors import NO_OWNER, expected_owner_errors, write_owners_csv
from tidemark.examples.verify import read_committed
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames

pytestmark = pytest.mark.timeout(600)

OWNER_ERRORS = "tidemark.examples.owner_errors:owner_errors"
UNPARSABLE = [b"not json at all", b'{"ts": 1700000000000, "status": 200}', b'{"url": "/no-ts"}']


def _produce_one_each(bootstrap: str, topic: str, values: list[bytes]) -> list[tuple[str, int, int]]:
    producer = Producer(producer_config({"bootstrap.servers": bootstrap}))
    origins: list[tuple[str, int, int]] = []
    for n, value in enumerate(values):
        producer.produce(topic, value=value, partition=n % 4,
                         on_delivery=lambda err, msg: origins.append((msg.topic(), msg.partition(), msg.offset())))
    assert producer.flush(30) == 0
    return sorted(origins)


def test_a_spark_step_parses_the_input_dead_letters_what_it_cannot_and_its_savepoint_restores_without_it(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    dead_letter_topic = TopicNames(unique_name("tm")).dead_letters
    first, second = (lambda records: (records[:800], records[800:]))(list(generate(1400, seed=38)))
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        client = pipe.client()
        job = pipe.start_job(URL_COUNTS, topics.single_stage_args(spark_step=True))
        produce(kafka_bootstrap, topics.input, first[:400], 4)
        origins = _produce_one_each(kafka_bootstrap, topics.input, UNPARSABLE)
        produce(kafka_bootstrap, topics.input, first[400:], 4)
        assert verify_single_stage(kafka_bootstrap, topics, first, timeout_s=240).exactly_once
        letters = dead_letters(kafka_bootstrap, dead_letter_topic, set(origins), timeout_s=60)
        request = client.trigger_savepoint(topics.job_id, stop=True)
        done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert done["status"] == "COMPLETED", done
        assert job.wait(timeout_s=120) == 0

        plain = pipe.start_job(URL_COUNTS, topics.single_stage_args(), from_savepoint=done["metadata_path"])
        produce(kafka_bootstrap, topics.input, second, 4)
        verdict = verify_single_stage(kafka_bootstrap, topics, first + second, timeout_s=240)
        [attempt, *_] = plain.events("starting attempt")
        extra = read_committed(kafka_bootstrap, topics.output, expect=len(first) + len(second) + 1, timeout_s=5,
                               settle_s=0)
        plain.stop()
    by_origin = {(d.origin_topic, d.origin_partition, d.origin_offset): d for d in letters}
    assert set(by_origin) >= set(origins), by_origin.keys()
    rejected = [by_origin[origin] for origin in origins]
    assert {letter.error_type for letter in rejected} == {"spark-step-rejected"}, rejected
    assert {letter.value for letter in rejected} == set(UNPARSABLE)  # the original bytes
    assert {letter.service for letter in rejected} == {"worker"}
    assert attempt["restore"] == done["metadata_path"]
    assert verdict.exactly_once, verdict
    assert verdict.records == len(first) + len(second)
    assert len(extra) == len(first) + len(second), "an unparsable record reached the function"


def test_a_spark_step_joins_a_static_table_and_its_savepoint_restores_into_a_changed_step(
        tmp_path, kafka_bootstrap, unique_name):
    """The worked example (``tidemark.examples.owner_errors``): ``from_json``, a filter on the
    status and a join with a CSV table of URL owners, keyed by the owner column. Stopped with a
    savepoint and restored with the filter changed (304 counts too from then on): each owner's
    count continues from its savepoint value, exactly once."""
    topics = topics_for(unique_name)
    owners = {url: ("web" if n % 3 == 0 else "payments" if n % 3 == 1 else "search")
              for n, url in enumerate(URLS[:40])}  # the last URLs have no owner: "nobody"
    table = str(write_owners_csv(tmp_path / "owners.csv", owners))
    first, second = (lambda records: (records[:1000], records[1000:]))(list(generate(2000, seed=39)))
    expected = expected_owner_errors(first, owners, 400) + expected_owner_errors(second, owners, 300)
    job_args = {"owners_csv": table, "job_id": topics.job_id, "input_topic": topics.input,
                "output_topic": topics.output}
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        client = pipe.client()
        job = pipe.start_job(OWNER_ERRORS, job_args)
        produce(kafka_bootstrap, topics.input, first, 4)
        read_committed(kafka_bootstrap, topics.output, expect=sum(expected_owner_errors(first, owners).values()),
                       timeout_s=240, settle_s=0)
        request = client.trigger_savepoint(topics.job_id, stop=True)
        done = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert done["status"] == "COMPLETED", done
        assert job.wait(timeout_s=120) == 0
        changed = pipe.start_job(OWNER_ERRORS, {**job_args, "min_status": 300}, from_savepoint=done["metadata_path"])
        produce(kafka_bootstrap, topics.input, second, 4)
        output = read_committed(kafka_bootstrap, topics.output, expect=sum(expected.values()), timeout_s=240)
        changed.stop()
    counts: dict[str, list[int]] = {}
    for value in output:
        counts.setdefault(value["owner"], []).append(value["errors"])
    assert {owner: len(seen) for owner, seen in counts.items()} == dict(expected)
    assert all(seen == list(range(1, len(seen) + 1)) for seen in counts.values()), counts
    assert expected[NO_OWNER] > 0 and expected["web"] > 0
