"""The event-log reader against a real broker: a caught-up reader that confirms delivery keeps
reading promptly, its confirmations included, while its topics are idle."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from tidemark.chassis.replay import EventLogReader
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec

pytestmark = pytest.mark.integration


def test_confirming_delivery_of_idle_topics_does_not_stall_reading(kafka_bootstrap, unique_name) -> None:
    topics = [unique_name(name) for name in ("control", "acks", "events", "heartbeats")]
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(t, 1) for t in topics])
    reader = EventLogReader({"bootstrap.servers": kafka_bootstrap}, topics, confirm_delivery=True)
    reader.open()
    try:
        polls: list[float] = []
        deadline = time.monotonic() + 4.0  # about four confirmations (one a second)
        while time.monotonic() < deadline:
            started = time.monotonic()
            assert reader.poll(timeout_s=0.2) == []
            polls.append(time.monotonic() - started)
        # a poll is the 0.2 s wait plus, once a second, four end-offset questions: asked on the
        # fetching connection, each waited behind the fetch in flight (0.5 s): 2.2 s polls
        assert max(polls) < 1.0, f"slowest poll {max(polls):.2f}s"
        assert reader.delivered_at_ms is not None  # the idle topics' ends were read: confirmed
    finally:
        reader.close()
