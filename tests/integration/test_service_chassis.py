"""The service chassis against a real broker: health, dead letters, configuration, shutdown."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.local.cluster import LocalCluster
from tidemark.protocol import codec
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.protocol.messages import TaskAck, TaskSnapshot, TaskTimings
from tidemark.types import CheckpointId, JobId, KeyGroup, OperatorId, TaskId

pytestmark = pytest.mark.integration


def _ack(checkpoint_id: int) -> TaskAck:
    return TaskAck(
        job_id=JobId("j"), checkpoint_id=CheckpointId(checkpoint_id),
        task=TaskSnapshot(TaskId("op#0"), OperatorId("op"), 0, KeyGroup(0), KeyGroup(127)),
        timings=TaskTimings(), acked_at=1,
    )


def _consumed(service, topic: str) -> float:
    text = service.get("/metrics")[1].decode()
    found = re.search(rf'tidemark_messages_consumed_total{{service="coordinator",topic="{re.escape(topic)}"}} (\S+)', text)
    return float(found.group(1)) if found else 0.0


def _read_all(bootstrap: str, topic: str, count: int, timeout_s: float = 30.0) -> list:
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, None))
    consumer.assign([TopicPartition(topic, 0, 0)])
    records, deadline = [], time.monotonic() + timeout_s
    while len(records) < count and time.monotonic() < deadline:
        record = consumer.poll(0.3)
        if record is not None and not record.error():
            records.append(record)
    consumer.close()
    return records


@pytest.fixture
def coordinator(kafka_bootstrap, topic_names, tmp_path):
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix) as cluster:
        cluster.start(["coordinator"])
        cluster.wait_ready(timeout_s=60)
        yield cluster, cluster.services["coordinator"]


def test_health_endpoints_and_metrics(coordinator):
    _, service = coordinator
    assert service.get("/livez")[0] == 200
    assert service.get("/readyz")[0] == 200
    metrics = service.get("/metrics")[1].decode()
    assert 'tidemark_build_info{service="coordinator",version=' in metrics
    assert 'tidemark_service_ready{service="coordinator"} 1.0' in metrics


def test_malformed_records_go_to_dead_letters_and_processing_continues(coordinator, kafka_bootstrap, topic_names):
    _, service = coordinator
    valid = codec.encode(_ack(7))
    garbage = {
        "garbage": b"\xff\xfe not avro at all",
        "wrong-magic": b"\x01" + valid[1:],
        "unknown-schema-id": struct.pack(">bI", 0, 999_999) + valid[5:],
        "truncated": valid[: len(valid) // 2],
    }
    producer = Producer(producer_config({"bootstrap.servers": kafka_bootstrap}))
    for name, value in garbage.items():
        producer.produce(topic_names.acks, key=name.encode(), value=value)
    producer.produce(topic_names.acks, key=b"valid", value=valid)
    producer.flush(10)

    deadline = time.monotonic() + 30
    while _consumed(service, topic_names.acks) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _consumed(service, topic_names.acks) == 1.0, "the valid record after the bad ones was processed"
    assert service.get("/readyz")[0] == 200

    letters = [codec.decode(r.value()) for r in _read_all(kafka_bootstrap, topic_names.dead_letters, 4)]
    assert all(isinstance(letter, DeadLetter) for letter in letters)
    by_key = {letter.key.decode(): letter for letter in letters}
    assert set(by_key) == set(garbage)
    for name, letter in by_key.items():
        assert letter.origin_topic == topic_names.acks
        assert letter.origin_partition == 0
        assert letter.value == garbage[name]
        assert letter.service == "coordinator"
    assert {n: by_key[n].error_type for n in garbage} == {
        "garbage": "malformed", "wrong-magic": "bad-magic-byte",
        "unknown-schema-id": "unknown-schema-id", "truncated": "truncated",
    }
    assert sorted(letter.origin_offset for letter in letters) == [0, 1, 2, 3]
    metrics = service.get("/metrics")[1].decode()
    assert re.search(r'tidemark_dead_letters_total{reason="truncated",service="coordinator",topic="[^"]+"} 1.0', metrics)


def test_sigterm_stops_cleanly_within_bound(coordinator):
    cluster, service = coordinator
    started = time.monotonic()
    code = cluster.stop_one("coordinator", sig=signal.SIGTERM, timeout_s=30)
    assert code == 0
    assert time.monotonic() - started < 20


def test_a_service_whose_picked_port_is_taken_before_it_binds_starts_on_another(
        kafka_bootstrap, topic_names, tmp_path, monkeypatch):
    """A free port is free only until someone binds it: another test lane's process took one
    between the cluster's pick and the service's bind (run65). The cluster starts the service
    again on another port instead of failing the pipeline."""
    import tidemark.local.cluster as cluster_module

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        picks = iter([taken_port])
        real_free_port = cluster_module.free_port
        monkeypatch.setattr(cluster_module, "free_port", lambda: next(picks, None) or real_free_port())
        with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix) as cluster:
            cluster.start(["coordinator"])
            cluster.wait_ready(timeout_s=60)
            service = cluster.services["coordinator"]
            assert service.port != taken_port  # the first start exited 78 on the taken one
            assert service.get("/readyz")[0] == 200
    assert (f"error: coordinator: TIDEMARK_HTTP_PORT: 127.0.0.1:{taken_port} cannot be bound: address already in use"
            in service.log_path.read_text().splitlines())  # one line, not a trace, for who set the port


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"TIDEMARK_HTTP_PORT": "not-a-port"}, "TIDEMARK_HTTP_PORT"),
        ({"TIDEMARK_CHECKPOINT__INTERVAL_MS": "-5"}, "TIDEMARK_CHECKPOINT__INTERVAL_MS"),
        ({"TIDEMARK_KAFKA__SECURITY_PROTOCOL": "CARRIER_PIGEON"}, "TIDEMARK_KAFKA__SECURITY_PROTOCOL"),
        ({"TIDEMARK_CHECKPOINT_STORAGE_URL": "ftp://x"}, "TIDEMARK_CHECKPOINT_STORAGE_URL"),
    ],
)
def test_invalid_configuration_exits_naming_the_key(env, key, kafka_bootstrap, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "run", "coordinator"],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TIDEMARK_HOME": str(tmp_path), **env},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 78
    assert key in result.stderr


def test_config_file_unknown_key_is_rejected(kafka_bootstrap, tmp_path):
    config = tmp_path / "tidemark.yaml"
    config.write_text("topic_prefix: ok\nchekpoint: {}\n")
    result = subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "run", "coordinator"],
        env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "TIDEMARK_CONFIG_FILE": str(config)},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 78
    assert "TIDEMARK_CHEKPOINT" in result.stderr and "Extra inputs are not permitted" in result.stderr


def test_unknown_service_argument_says_what_was_expected():
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "run", "coordinatr"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "coordinator" in result.stderr and "checkpoint-store" in result.stderr
