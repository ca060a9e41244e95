"""tidemark.kafka.transactions.fence_transactional_ids against the session broker: fencing the id
of a producer that died inside a transaction aborts that transaction at once, so read_committed
readers reach the end of the partition again (instead of waiting for the transaction timeout)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tidemark.kafka.clients import producer_config
from tidemark.kafka.range_reader import RangeNotReachedError, read_messages
from tidemark.kafka.transactions import fence_transactional_ids


def _high_watermark(client: dict[str, Any], topic: str) -> int:
    # read_uncommitted: a read_committed consumer's high watermark is the last stable offset
    consumer = Consumer({**client, "group.id": "fencing-watermarks", "isolation.level": "read_uncommitted"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10.0, cached=False)[1]
    finally:
        consumer.close()


def _values(client: dict[str, Any], topic: str, isolation: str, idle_timeout_s: float) -> list[bytes]:
    return [message.value() for messages in read_messages(client, topic, 0, 0, _high_watermark(client, topic),
                                                          isolation_level=isolation, idle_timeout_s=idle_timeout_s)
            for message in messages]


def test_fencing_aborts_an_open_transaction_and_read_committed_readers_reach_the_end(
        client: dict[str, Any], new_topic: Callable[[str, int], str], unique_name: Callable[[str], str]) -> None:
    topic = new_topic("fenced", 1)
    gone = unique_name("txn-gone")
    dead = Producer(producer_config(client, gone))  # a worker that dies inside its transaction
    dead.init_transactions(30)
    dead.begin_transaction()
    for i in range(3):
        dead.produce(topic, value=f"open/{i}".encode())
    assert dead.flush(10) == 0
    later = Producer(producer_config(client))
    later.produce(topic, value=b"after")
    assert later.flush(10) == 0

    with pytest.raises(RangeNotReachedError):  # the open transaction holds read_committed readers back
        _values(client, topic, "read_committed", idle_timeout_s=2.0)

    fence_transactional_ids(client, [gone, unique_name("txn-never-used")])

    assert _values(client, topic, "read_committed", idle_timeout_s=20.0) == [b"after"]
    assert sorted(_values(client, topic, "read_uncommitted", idle_timeout_s=20.0)) == \
        [b"after", b"open/0", b"open/1", b"open/2"]
    with pytest.raises(KafkaException):  # the dead worker, were it alive, is fenced
        dead.commit_transaction(10)
