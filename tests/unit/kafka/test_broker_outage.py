"""tidemark.kafka.outage: which errors are an outage, and how an outage is reported and waited out;
and the limit on aiokafka's own lines during one (tidemark.chassis.logs.RepeatLimiter)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException
from structlog.testing import capture_logs

from tidemark.kafka import outage
from tidemark.kafka.metadata import watermark_offsets, watermarks
from tidemark.kafka.outage import LOG_EVERY_S, SETTLE_S, BrokerUnavailableError, BrokerWait, unavailable
from tidemark.chassis.logs import RepeatLimiter
from tidemark.types import TopicPartition


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("error", [
    KafkaException(KafkaError(KafkaError._TRANSPORT)),
    KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata: Local: Timed out")),
    KafkaError(KafkaError._ALL_BROKERS_DOWN),
    KafkaException(KafkaError(KafkaError._DESTROY_BROKER,  # what a killed broker's end offsets call raised
                              "Failed to get watermark offsets: Local: Broker handle destroyed without termination")),
    KafkaError(KafkaError.UNKNOWN, retriable=True),
    BrokerUnavailableError("3 records not delivered"),
    TimeoutError(),
])
def test_outage_errors_are_recognised(error):
    assert unavailable(error)


@pytest.mark.parametrize("error", [
    None,
    KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)),
    KafkaException(KafkaError(KafkaError._TIMED_OUT, fatal=True)),  # e.g. fenced: never waited out
    KafkaException(KafkaError(KafkaError._TIMED_OUT, txn_requires_abort=True)),  # abort, not retry
    ValueError("bad record"),
])
def test_other_errors_are_not_an_outage(error):
    assert not unavailable(error)


def test_an_outage_is_logged_once_then_every_ten_seconds_and_its_end_once():
    clock = Clock()
    wait = BrokerWait("127.0.0.1:9092", clock)
    with capture_logs() as logs:
        for _ in range(50):  # many clients failing within the first seconds
            wait.failed("probe", "Local: Timed out")
            clock.now += 0.1
        clock.now += LOG_EVERY_S
        wait.failed("consumer lag", "Local: Timed out")
        wait.failed("consumer lag", "Local: Timed out")
        wait.succeeded()
        wait.succeeded()
    events = [(e["event"], e.get("operation")) for e in logs]
    assert events == [("waiting for the broker", "probe"), ("waiting for the broker", "consumer lag"),
                      ("broker is back", None)]
    assert all(e["bootstrap"] == "127.0.0.1:9092" for e in logs)
    assert logs[-1]["outage_s"] == pytest.approx(15.0, abs=0.01)
    assert not wait.waiting
    assert wait.outages == 1  # one outage, however many failures it had
    wait.failed("probe", "Local: Timed out")
    assert wait.outages == 2


def test_call_retries_while_the_broker_is_unavailable_and_raises_other_errors():
    wait = BrokerWait("127.0.0.1:9092")
    outcomes = [KafkaException(KafkaError(KafkaError._TRANSPORT)), KafkaException(KafkaError(KafkaError._TIMED_OUT))]

    def operation() -> str:
        if outcomes:
            raise outcomes.pop(0)
        return "done"

    with capture_logs() as logs:
        assert wait.call("list topics", operation) == "done"
    assert [e["event"] for e in logs] == ["waiting for the broker", "broker is back"]

    def refused() -> None:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        wait.call("list topics", refused)


def test_call_waits_for_a_partition_created_a_moment_ago_for_a_while_and_not_as_an_outage(monkeypatch):
    monkeypatch.setattr(outage, "RETRY_S", 0.0)
    clock = Clock()
    wait = BrokerWait("127.0.0.1:9092", clock)
    unknown = KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Failed to get watermark offsets"))
    outcomes: list[Exception] = [unknown, unknown]

    def watermarks() -> tuple[int, int]:
        if outcomes:
            raise outcomes.pop(0)
        return 0, 7

    with capture_logs() as logs:
        assert wait.call("read control", watermarks) == (0, 7)
    assert not [e for e in logs if e["event"] == "waiting for the broker"] and wait.outages == 0

    def never_there() -> None:  # a partition that does not come: raised after SETTLE_S, not PATIENCE_S
        clock.now += 1.0
        raise unknown

    started = clock.now
    with pytest.raises(KafkaException) as raised:
        wait.call("read control", never_there)
    assert raised.value is unknown and SETTLE_S <= clock.now - started <= SETTLE_S + 2


def test_aiokafka_reconnect_lines_are_limited_per_template():
    limiter = RepeatLimiter(("aiokafka",), every_s=3600)

    def record(name: str, msg: str, *args: object) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)

    passed = [limiter.filter(record("aiokafka.conn", "Unable connect to node with id %s: %s", 1, n))
              for n in range(500)]
    assert passed.count(True) == 1
    assert limiter.filter(record("aiokafka.cluster", "Unable to update metadata from %s", [1]))  # another template
    assert all(limiter.filter(record("tidemark.worker", "checkpoint acked")) for _ in range(3))  # ours: never
    limiter.every_s = 0.0
    again = record("aiokafka.conn", "Unable connect to node with id %s: %s", 1, "refused")
    assert limiter.filter(again) and "499 more like it" in again.getMessage()


def test_a_partition_the_client_does_not_know_has_its_topic_asked_for_before_the_retry(monkeypatch):
    """A new consumer's metadata may not fetch a topic by itself (a worker once got
    _UNKNOWN_PARTITION for 20 s on a topic that long existed): the lookup names the topic in a
    Metadata request before it raises, so the retry finds the partition."""
    monkeypatch.setattr(outage, "RETRY_S", 0.0)

    class _Consumer:
        def __init__(self) -> None:
            self.known: set[str] = set()
            self.listed: list[str] = []

        def get_watermark_offsets(self, partition, timeout, cached):  # noqa: ANN001
            if partition.topic not in self.known:
                raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Failed to get watermark offsets"))
            return 0, 7

        def list_topics(self, topic, timeout):  # noqa: ANN001
            self.listed.append(topic)
            self.known.add(topic)

    consumer = _Consumer()
    wait = BrokerWait("127.0.0.1:9092", Clock())
    assert wait.call("control topic end", lambda: watermark_offsets(consumer, "control", 0, timeout_s=1.0)) == (0, 7)
    assert consumer.listed == ["control"]
    assert watermarks(consumer, [TopicPartition("control", 0)]) == {("control", 0): (0, 7)}
    assert consumer.listed == ["control"]  # known now: asked for once
