"""Topic creation rides through a broker that refuses new topics for a moment (a single-node KRaft
broker fenced after missing its heartbeats on a busy machine) and fails at once on a refusal that
stays. The broker's answers are scripted here: a real broker cannot be made to fence on cue."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec

pytestmark = pytest.mark.unit

FENCED = KafkaError(KafkaError.INVALID_REPLICATION_FACTOR,
                    "Unable to replicate the partition 1 time(s): All brokers are currently fenced.")
TOO_FEW = KafkaError(KafkaError.INVALID_REPLICATION_FACTOR,
                     "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
                     "cannot be reached because only 1 broker(s) are registered.")


UNANSWERED = None
"""A scripted answer: the request's future never completes (an overloaded controller)."""


class ScriptedAdmin:
    """Answers CreateTopics with the scripted errors in turn (UNANSWERED: no answer), then creates;
    lists what it created, after ``list_failures`` failed listings."""

    def __init__(self, refusals: list[KafkaError | None], list_failures: int = 0) -> None:
        self.refusals = list(refusals)
        self.list_failures = list_failures
        self.topics: dict[str, object] = {}
        self.attempts = 0

    def list_topics(self, topic=None, timeout=None):
        if self.list_failures:
            self.list_failures -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller"))
        listed = {name: SimpleNamespace(error=None, partitions={0: None}) for name in self.topics}
        return SimpleNamespace(topics=listed)

    def create_topics(self, new_topics, operation_timeout=None):
        self.attempts += 1
        futures = {}
        for topic in new_topics:
            future: Future = Future()
            if self.refusals:
                refusal = self.refusals.pop(0)
                if refusal is not UNANSWERED:
                    future.set_exception(KafkaException(refusal))
            else:
                self.topics[topic.topic] = topic
                future.set_result(None)
            futures[topic.topic] = future
        return futures


def test_a_fenced_broker_is_asked_again_until_it_creates_the_topic():
    admin = ScriptedAdmin([FENCED, FENCED, KafkaError(KafkaError.BROKER_NOT_AVAILABLE)])
    assert ensure_topics(admin, [TopicSpec("access-log", 4)], listed_within_s=10) == ["access-log"]
    assert admin.attempts == 4


def test_a_refusal_that_stays_fails_at_once():
    admin = ScriptedAdmin([TOO_FEW])
    with pytest.raises(KafkaException, match="only 1 broker"):
        ensure_topics(admin, [TopicSpec("access-log", 4)], replication_factor=3, listed_within_s=10)
    assert admin.attempts == 1


def test_a_broker_fenced_past_the_deadline_fails_naming_the_reason():
    admin = ScriptedAdmin([FENCED] * 100)
    with pytest.raises(KafkaException, match="fenced"):
        ensure_topics(admin, [TopicSpec("access-log", 4)], listed_within_s=1)
    assert 2 <= admin.attempts <= 4


def test_a_request_the_overloaded_broker_does_not_answer_and_a_listing_that_times_out_are_asked_again():
    admin = ScriptedAdmin([UNANSWERED, UNANSWERED], list_failures=2)
    assert ensure_topics(admin, [TopicSpec("access-log", 4)], timeout_s=0.05, listed_within_s=10) == ["access-log"]
    assert admin.attempts == 3


def test_a_broker_that_never_answers_fails_in_one_line_at_the_deadline():
    admin = ScriptedAdmin([UNANSWERED] * 100)
    with pytest.raises(KafkaException, match="creating topic access-log: the broker did not answer"):
        ensure_topics(admin, [TopicSpec("access-log", 4)], timeout_s=0.05, listed_within_s=0.3)
