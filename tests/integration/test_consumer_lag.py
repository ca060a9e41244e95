"""``ConsumerLag`` against a real broker: the lag gauges and which partitions still hold unread
records; that answer becomes unknown (None: no partition may go idle) when the last report is
stale or while the process is waiting for the broker, so an outage never makes a backlog look read."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.metadata import metadata_consumer
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.topics import TopicSpec
from tidemark.runtime.consumer_lag import STALE_AFTER_S, ConsumerLag, unread_partitions
from tidemark.runtime.metrics import CONSUMER_LAG

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
        assert lag.unread({(topic, 0): 2}) == {(topic, 0)}
        assert CONSUMER_LAG.labels("lag-job", topic, "0")._value.get() == 3
        assert lag.unread({(topic, 0): 5}) == set()  # caught up; partition 1 is empty

        clock.now += STALE_AFTER_S + 0.1  # no answer since: a backlog may have grown unseen
        assert lag.unread({(topic, 0): 5}) is None
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        assert lag.unread({(topic, 0): 5}) == set()

        wait = broker_wait(client)
        wait.failed("test outage", "paused")  # any client of the process waiting for the broker
        try:
            assert lag.unread({(topic, 0): 5}) is None
        finally:
            wait.succeeded()
        assert lag.unread({(topic, 0): 5}) == set()

        lag.report({(topic, 0): 5}, [(unique_name("missing"), 0)])  # a report without an answer
        assert lag.unread({(topic, 0): 5}) is None  # (a broker going away answers so first)
        lag.report({(topic, 0): 5}, [(topic, 0), (topic, 1)])
        assert lag.unread({(topic, 0): 5}) == set()
    finally:
        metadata.close()
