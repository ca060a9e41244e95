"""The embedded broker answers the Kafka protocol and its manager starts and stops it cleanly."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import EmbeddedBroker, _pid_alive
from tidemark.kafka.admin import TruncationResult, delete_records_before, ensure_topics
from tidemark.kafka.topics import TopicSpec

pytestmark = pytest.mark.integration


def test_manager_start_status_stop(tmp_path):
    broker = EmbeddedBroker(tmp_path)
    status = broker.start(tie_to_parent=True)
    assert status.running and status.port
    assert broker.start().pid == status.pid  # idempotent
    assert broker.stop() is True
    assert not _pid_alive(status.pid)
    assert broker.status().running is False
    assert broker.stop() is False  # repeated stop is harmless


def test_transactional_round_trip(kafka_bootstrap, unique_name):
    topic = unique_name("rt")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert ensure_topics(admin, [TopicSpec(topic, 2)]) == [topic]
    assert ensure_topics(admin, [TopicSpec(topic, 2)]) == []  # idempotent
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("tx")})
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    producer.commit_transaction(10)
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("g"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen = set()
    for _ in range(100):
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            seen.add(msg.value())
        if len(seen) == 10:
            break
    consumer.close()
    assert seen == {f"v{i}".encode() for i in range(10)}


def test_delete_records_is_detected_when_unsupported(kafka_bootstrap, unique_name):
    topic = unique_name("dr")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(topic, 1)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, value=b"x", partition=0)
    producer.flush(10)
    result = delete_records_before(admin, {(topic, 0): 3}, timeout_s=5)
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        assert result is TruncationResult.PHYSICAL
    else:  # the embedded broker does not implement DeleteRecords (notes/embedded-broker.md)
        assert result is TruncationResult.UNSUPPORTED


def test_broker_cli_start_status_stop(tmp_path):
    import subprocess
    import sys

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidemark.cli", "broker", *args, "--home", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)

    started = cli("start")
    assert started.returncode == 0, started.stderr
    assert "bootstrap=127.0.0.1:" in started.stdout
    status = cli("status", "--json")
    assert status.returncode == 0 and '"running": true' in status.stdout
    pid = EmbeddedBroker(tmp_path / "broker").status().pid
    try:
        assert cli("stop").stdout.strip() == "broker stopped"
    finally:
        EmbeddedBroker(tmp_path / "broker").stop()
    assert not _pid_alive(pid)
    assert cli("status").returncode == 1
    assert "port" in cli("start", "--port", "70000").stderr  # out of range: says what was expected
