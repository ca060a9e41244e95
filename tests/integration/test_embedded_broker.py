"""The embedded broker answers the Kafka protocol, and its manager starts, restarts and stops it
cleanly: Apache Kafka (the default) keeps its data and port across restarts, also after SIGKILL,
and its JVM maps the class archive an earlier broker left; Tansu (selectable) starts and stops the
same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.broker.apache_kafka import ARTIFACTS, KAFKA_VERSION
from tidemark.broker.class_archive import PARTIAL, adopt_partial
from tidemark.broker.embedded import EmbeddedBroker
from tidemark.broker.engine import EmbeddedBrokerError
from tidemark.kafka.admin import TruncationResult, delete_records_before, ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.jvm import java_binary
from tidemark.maven import COMPLETE_MARKER, fetch_classpath
from tidemark.processes import pid_alive

pytestmark = pytest.mark.integration


def _produce_transactionally(bootstrap: str, topic: str, values: list[bytes], txn_id: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value, partition=i % 2)
    producer.commit_transaction(30)


def _read_committed(bootstrap: str, topic: str, partitions: int, want: int) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: set[bytes] = set()
    for _ in range(150):
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            seen.add(msg.value())
        if len(seen) >= want:
            break
    consumer.close()
    return seen


@pytest.mark.parametrize("engine", ["kafka", "tansu"])
def test_manager_start_status_stop(tmp_path, engine):
    broker = EmbeddedBroker(tmp_path, engine_name=engine)
    status = broker.start(tie_to_parent=True)
    assert status.running and status.port and status.engine == engine
    assert status.startup_s is not None and status.startup_s > 0
    assert broker.start().pid == status.pid  # idempotent
    assert broker.stop() is True
    assert not pid_alive(status.pid)
    assert broker.status().running is False
    assert broker.stop() is False  # repeated stop is harmless


def test_apache_kafka_keeps_data_and_port_across_restarts_and_sigkill(tmp_path, unique_name):
    broker = EmbeddedBroker(tmp_path, engine_name="kafka")
    first = broker.start(tie_to_parent=True)
    try:
        assert first.fetch_s is not None  # 0.0 when the jar cache was warm
        topic = unique_name("kept")
        admin = AdminClient({"bootstrap.servers": first.bootstrap_servers})
        ensure_topics(admin, [TopicSpec(topic, 2)])
        _produce_transactionally(first.bootstrap_servers, topic, [b"a", b"b"], unique_name("tx"))
        assert broker.stop() is True
        second = broker.start(tie_to_parent=True)
        assert second.port == first.port and second.fetch_s == 0.0  # same address, cache reused
        _produce_transactionally(second.bootstrap_servers, topic, [b"c", b"d"], unique_name("tx2"))
        os.kill(second.pid, signal.SIGKILL)  # an unclean end: Kafka recovers its logs at the next start
        deadline = time.monotonic() + 10
        while pid_alive(second.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        third = broker.start(tie_to_parent=True)
        assert third.port == first.port and third.pid != second.pid
        assert _read_committed(third.bootstrap_servers, topic, 2, 4) == {b"a", b"b", b"c", b"d"}
    finally:
        broker.stop()


def test_transactional_round_trip(kafka_bootstrap, unique_name):
    topic = unique_name("rt")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    assert ensure_topics(admin, [TopicSpec(topic, 2)]) == [topic]
    assert ensure_topics(admin, [TopicSpec(topic, 2)]) == []  # idempotent
    _produce_transactionally(kafka_bootstrap, topic, [f"v{i}".encode() for i in range(10)], unique_name("tx"))
    assert _read_committed(kafka_bootstrap, topic, 2, 10) == {f"v{i}".encode() for i in range(10)}


def test_delete_records_moves_the_log_start_offset(kafka_bootstrap, unique_name):
    topic = unique_name("dr")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    ensure_topics(admin, [TopicSpec(topic, 1)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(5):
        producer.produce(topic, value=b"x", partition=0)
    producer.flush(10)
    assert delete_records_before(admin, {(topic, 0): 3}, timeout_s=10) is TruncationResult.PHYSICAL
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    consumer.close()
    assert (low, high) == (3, 5)


def test_tansu_lacks_delete_records_and_says_so(tmp_path, unique_name):
    """What differs if you choose Tansu (docs/architecture.md): DeleteRecords is detected, not hidden."""
    broker = EmbeddedBroker(tmp_path, engine_name="tansu")
    bootstrap = broker.start(tie_to_parent=True).bootstrap_servers
    try:
        topic = unique_name("dr")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        ensure_topics(admin, [TopicSpec(topic, 1)])
        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce(topic, value=b"x", partition=0)
        producer.flush(10)
        assert delete_records_before(admin, {(topic, 0): 1}, timeout_s=5) is TruncationResult.UNSUPPORTED
    finally:
        broker.stop()


def test_an_unknown_engine_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_BROKER_ENGINE", "redpanda")
    with pytest.raises(EmbeddedBrokerError, match="TIDEMARK_BROKER_ENGINE='redpanda'.*kafka, tansu"):
        EmbeddedBroker(tmp_path).start()


def test_broker_cli_start_status_stop(tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tidemark.cli", "broker", *args, "--home", str(tmp_path)],
                              capture_output=True, text=True, timeout=180)

    started = cli("start")
    assert started.returncode == 0, started.stderr
    assert "engine=kafka" in started.stdout and "bootstrap=127.0.0.1:" in started.stdout
    assert "started_in=" in started.stdout
    status = cli("status", "--json")
    assert status.returncode == 0 and '"running": true' in status.stdout and '"engine": "kafka"' in status.stdout
    pid = EmbeddedBroker(tmp_path / "broker").status().pid
    try:
        assert cli("stop").stdout.strip() == "broker stopped"
    finally:
        EmbeddedBroker(tmp_path / "broker").stop()
    assert not pid_alive(pid)
    assert cli("status").returncode == 1
    assert "port" in cli("start", "--port", "70000").stderr  # out of range: says what was expected


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().split("\0")


def test_a_stopped_broker_leaves_the_class_archive_later_starts_map(tmp_path, monkeypatch):
    libs, _ = fetch_classpath(f"kafka-{KAFKA_VERSION}", ARTIFACTS)
    cache = tmp_path / "cache" / f"kafka-{KAFKA_VERSION}"  # the machine's jars, no archive yet
    cache.mkdir(parents=True)
    (cache / "libs").symlink_to(libs.resolve())
    (cache / COMPLETE_MARKER).write_text((libs.parent / COMPLETE_MARKER).read_text())
    monkeypatch.setenv("TIDEMARK_CACHE_DIR", str(tmp_path / "cache"))
    broker = EmbeddedBroker(tmp_path / "broker", engine_name="kafka")
    try:
        first = broker.start(tie_to_parent=True)
        assert any(arg.startswith("-XX:ArchiveClassesAtExit=") for arg in _cmdline(first.pid))
        assert broker.stop() is True  # the JVM writes the archive as it exits
        archives = list(cache.glob("broker-classes-*.jsa"))
        assert len(archives) == 1 and not list((tmp_path / "broker").rglob(PARTIAL))
        second = broker.start(tie_to_parent=True)
        assert f"-XX:SharedArchiveFile={archives[0]}" in _cmdline(second.pid)
        os.kill(second.pid, signal.SIGKILL)  # a restart after a crash maps it too
        deadline = time.monotonic() + 10
        while pid_alive(second.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        broker.stop()
        third = broker.start(tie_to_parent=True)
        assert f"-XX:SharedArchiveFile={archives[0]}" in _cmdline(third.pid)
    finally:
        broker.stop()


def test_a_truncated_class_archive_is_never_adopted(tmp_path):
    java = java_binary()
    assert java
    libs, _ = fetch_classpath(f"kafka-{KAFKA_VERSION}", ARTIFACTS)
    classpath = f"{libs.resolve()}/*"
    written = tmp_path / "written.jsa"
    subprocess.run([java, f"-XX:ArchiveClassesAtExit={written}", "-cp", classpath, "-version"],
                   capture_output=True, check=True, timeout=120)
    truncated, archive = tmp_path / PARTIAL, tmp_path / "archive.jsa"
    truncated.write_bytes(written.read_bytes()[: written.stat().st_size // 2])  # a JVM killed as it wrote
    assert adopt_partial(java, (), classpath, truncated, archive) is False
    assert not truncated.exists() and not archive.exists()  # removed: a JVM mapping it would crash
    written.replace(truncated)
    assert adopt_partial(java, (), classpath, truncated, archive) is True
    assert archive.is_file() and not truncated.exists()
