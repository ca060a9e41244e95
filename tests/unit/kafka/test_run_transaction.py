"""tidemark.kafka.transactions.run_transaction: a commit the broker aborted is aborted and the
transaction written once more; aborted again once written anew, the producer is given up
(:class:`TransactionAbortedAgain`); an outage is waited through; a fatal error is raised."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.kafka.outage import BrokerWait
from tidemark.kafka.transactions import TransactionAbortedAgain, run_transaction

ABORTED = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to flush all outstanding messages: "
                                    "8 message(s) remaining", txn_requires_abort=True))
UNAVAILABLE = KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down", retriable=True))
FENCED = KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer attempt", fatal=True))


class Producer:
    """The transactional calls of a confluent-kafka producer; each commit answers with the next
    of ``commits`` (an exception raised, None: committed)."""

    def __init__(self, *commits: Exception | None) -> None:
        self.commits = list(commits)
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, timeout_s: float) -> None:
        self.calls.append("commit")
        answer = self.commits.pop(0)
        if answer is not None:
            raise answer

    def abort_transaction(self, timeout_s: float) -> None:
        self.calls.append("abort")


@pytest.fixture
def wait(monkeypatch: pytest.MonkeyPatch) -> BrokerWait:
    monkeypatch.setattr("tidemark.kafka.outage.RETRY_S", 0.01)
    return BrokerWait("localhost:9")


def test_a_transaction_committed_at_once_is_written_once(wait: BrokerWait) -> None:
    producer = Producer(None)
    run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert producer.calls == ["begin", "write", "commit"]


def test_a_transaction_the_broker_aborted_is_aborted_and_written_again(wait: BrokerWait) -> None:
    producer = Producer(ABORTED, None)
    run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert producer.calls == ["begin", "write", "commit", "abort", "begin", "write", "commit"]


def test_a_transaction_aborted_again_after_it_was_written_anew_gives_the_producer_up(wait: BrokerWait) -> None:
    producer = Producer(ABORTED, ABORTED, None)
    with pytest.raises(TransactionAbortedAgain, match="write to t: the transaction was aborted again") as raised:
        run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert "8 message(s) remaining" in str(raised.value)
    # not written a third time, nor aborted: the next attempt's producer fences this one
    assert producer.calls == ["begin", "write", "commit", "abort", "begin", "write", "commit"]


def test_an_outage_at_the_commit_is_waited_through_without_writing_again(wait: BrokerWait) -> None:
    producer = Producer(UNAVAILABLE, UNAVAILABLE, None)
    run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert producer.calls == ["begin", "write", "commit", "commit", "commit"]


def test_aborts_between_outages_count_once_each_transaction(wait: BrokerWait) -> None:
    """Each call of run_transaction is a transaction of its own: an abort in an earlier one does
    not count against the next."""
    producer = Producer(ABORTED, None, ABORTED, None)
    for _ in range(2):
        run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert producer.calls.count("abort") == 2 and producer.calls.count("write") == 4


def test_a_fenced_producer_raises_at_once(wait: BrokerWait) -> None:
    producer = Producer(FENCED)
    with pytest.raises(KafkaException, match="fenced"):
        run_transaction(producer, lambda: producer.calls.append("write"), wait, "write to t", 1.0)
    assert producer.calls == ["begin", "write", "commit"]
