"""tidemark.kafka.transactions.TransactionsStarting: a producer's transactions initialized on a
thread of their own, what must come first before them, and the first use waiting for them and
raising what they raised."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.kafka.outage import BrokerWait
from tidemark.kafka.transactions import TransactionsStarting


class Producer:
    """The one call a start makes of a confluent-kafka producer, gated by the test."""

    def __init__(self, error: Exception | None = None) -> None:
        self.gate, self.error, self.calls = threading.Event(), error, []

    def init_transactions(self, timeout_s: float) -> None:
        self.gate.wait(10)
        self.calls.append("init_transactions")
        if self.error is not None:
            raise self.error


def test_the_start_runs_meanwhile_and_done_waits_for_it() -> None:
    producer = Producer()
    start = TransactionsStarting(producer, BrokerWait("localhost:9"), 5.0, "transactions-t",
                                 before=lambda: producer.calls.append("topics"))
    finished = threading.Event()
    waiter = threading.Thread(target=lambda: (start.done(), finished.set()))
    waiter.start()
    assert not finished.wait(0.2)  # the constructor returned, the start goes on
    producer.gate.set()
    waiter.join(10)
    assert finished.is_set() and producer.calls == ["topics", "init_transactions"]
    assert start.succeeded()


def test_what_the_start_raised_is_raised_at_each_use_and_the_close_skips_the_flush() -> None:
    fenced = KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
    producer = Producer(fenced)
    producer.gate.set()
    start = TransactionsStarting(producer, BrokerWait("localhost:9"), 5.0, "transactions-t")
    for _ in range(2):
        with pytest.raises(KafkaException) as raised:
            start.done()
        assert raised.value is fenced
    assert not start.succeeded()


def test_a_failing_step_before_leaves_the_transactions_uninitialized() -> None:
    producer = Producer()
    producer.gate.set()

    def refused() -> None:
        raise PermissionError("topic creation refused")

    start = TransactionsStarting(producer, BrokerWait("localhost:9"), 5.0, "transactions-t", before=refused)
    with pytest.raises(PermissionError, match="refused"):
        start.done()
    assert producer.calls == []
