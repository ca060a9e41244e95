"""``ConsumerLag`` against a real broker: the lag gauges and which partitions still hold unread
records; that answer becomes unknown (None: no partition may go idle) when the last report is
stale, while the process is waiting for the broker and after an outage until the broker answers
again, so an outage never makes a backlog look read nor its silence look like idleness."""

from __future__ import annotations

import os
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import EmbeddedBroker
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.metadata import metadata_consumer, watermarks
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.topics import TopicSpec
from tidemark.local.pipeline import wait_for
from tidemark.processes import paused
from tidemark.api import EventTime
from tidemark.runtime.worker.consumer_lag import REPORT_EVERY_S, STALE_AFTER_S, ConsumerLag, unread_partitions
from tidemark.runtime.job.metrics import CONSUMER_LAG
from tidemark.runtime.worker.watermarks import SourceWatermarks, Unread

pytestmark = pytest.mark.integration


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_unread_partitions_allow_one_offset_for_a_transaction_marker():
    ends = {("t", 0): 10, ("t", 1): 11, ("t", 2): 0}
    assert unread_partitions(ends, {("t", 0): 9, ("t", 1): 8}) == {("t", 1)}
    assert unread_partitions(ends, {}) == {("t", 0), ("t", 1)}


def test_unread_follows_the_end_offsets_and_is_unknown_when_stale_failed_or_during_an_outage(kafka_bootstrap, unique_name):
    client = {"bootstrap.servers": kafka_bootstrap}
    topic = unique_name("input")
    ensure_topics(AdminClient(client), [TopicSpec(topic, 2)])
    producer = Producer(client)
    for i in range(5):
        producer.produce(topic, value=b"x", partition=0)
    producer.flush(10)
    clock = _Clock()
    metadata = metadata_consumer(client)
    lag = ConsumerLag(client, metadata, "lag-job", "stage", [topic], clock=clock)
    try:
        assert lag.unread({}) is None  # before the first report: not known
        lag.report({(topic, 0): 2})
        first = lag.unread({(topic, 0): 2})
        assert first is not None and first.partitions == {(topic, 0)}
        assert first.asked_ms == first.answering_since_ms == 1000.0 * 1000
        assert CONSUMER_LAG.labels("lag-job", topic, "0")._value.get() == 3
        assert lag.unread({(topic, 0): 5}).partitions == set()  # caught up; partition 1 is empty

        clock.now += REPORT_EVERY_S
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        again = lag.unread({(topic, 0): 5})
        assert again.asked_ms == clock.now * 1000 and again.answering_since_ms == first.answering_since_ms

        clock.now += STALE_AFTER_S + 0.1  # no answer since: a backlog may have grown unseen
        assert lag.unread({(topic, 0): 5}) is None
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        assert lag.unread({(topic, 0): 5}).answering_since_ms == clock.now * 1000  # anew after the gap

        wait = broker_wait(client)
        clock.now += 1.0
        wait.failed("test outage", "paused")  # any client of the process waiting for the broker
        try:
            assert lag.unread({(topic, 0): 5}) is None
        finally:
            wait.succeeded()
        assert lag.unread({(topic, 0): 5}) is None  # not answered since the outage
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        assert lag.unread({(topic, 0): 5}) == Unread(frozenset(), clock.now * 1000, clock.now * 1000)

        lag.report({(topic, 0): 5}, [(unique_name("missing"), 0)])  # a report without an answer
        assert lag.unread({(topic, 0): 5}) is None  # (a broker going away answers so first)
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        assert lag.unread({(topic, 0): 5}).partitions == set()
    finally:
        metadata.close()


@pytest.mark.skipif(bool(os.environ.get("KAFKA_BOOTSTRAP_SERVERS")),
                    reason="pauses its own embedded broker, which an external cluster is not")
def test_a_report_held_by_a_paused_broker_answers_late_and_its_silence_makes_no_partition_idle(tmp_path, unique_name):
    """SIGSTOP: the broker neither answers nor refuses, so a lag report asked meanwhile is held
    and answered when it resumes, with the ends from before any producer's backlog reached it.
    That answer starts the broker's unbroken answers anew: a partition silent through the pause
    (longer than its idle timeout) is not idle by it."""
    broker = EmbeddedBroker(tmp_path / "broker", engine_name="kafka")
    status = broker.start(tie_to_parent=True)
    assert status.pid is not None and status.bootstrap_servers
    client = {"bootstrap.servers": status.bootstrap_servers}
    topic = unique_name("input")
    ensure_topics(AdminClient(client), [TopicSpec(topic, 2)])
    metadata = metadata_consumer(client)
    reads = [(topic, 0), (topic, 1)]
    wait_for(lambda: _answers(metadata, reads), 30, "the new topic's leaders")
    lag = ConsumerLag(client, metadata, "paused-job", "stage", [topic])
    watermarks = SourceWatermarks(EventTime(idle_timeout_ms=2_000), reads)
    try:
        lag.report({}, reads)
        before = lag.unread({})
        assert before is not None and before.partitions == set()
        for partition in reads:
            watermarks.observe(partition, 10_000, time.monotonic() * 1000)
        assert watermarks.update(time.monotonic() * 1000, before).watermark == 9_999

        with paused(status.pid):  # every broker thread stopped before the report asks
            held = threading.Thread(target=lag.report, args=({}, reads))
            held.start()
            time.sleep(REPORT_EVERY_S + 1.0)
            assert held.is_alive(), lag.unread({})  # neither answered nor refused
        resumed_ms = time.monotonic() * 1000
        held.join(30)
        after = lag.unread({})
        assert after is not None and after.partitions == set()  # answered, after the pause
        assert after.asked_ms < resumed_ms - REPORT_EVERY_S * 1000 <= resumed_ms <= after.answering_since_ms
        assert not watermarks.update(time.monotonic() * 1000, after).idle  # silent 3 s, but not watched
    finally:
        metadata.close()
        broker.stop()


def _answers(metadata, reads) -> bool:
    try:
        watermarks(metadata, reads, timeout_s=2)
    except KafkaException:
        return False
    return True
