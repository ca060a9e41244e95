"""The start-up probe: an address where no broker listens gives one line, in bounded time, with
nothing from librdkafka on stderr."""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from tidemark.kafka.reachability import BrokerUnreachable, require_broker, short_reason


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_no_broker_at_the_address_is_one_line_naming_it_within_the_timeout(capfd: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(BrokerUnreachable) as caught:
        require_broker({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 7}, timeout_s=3.0)
    assert time.monotonic() - started < 8.0
    line = caught.value.one_line("coordinator")
    assert line.startswith(f"tidemark coordinator: cannot reach Kafka at 127.0.0.1:{port} "
                           "(check KAFKA_BOOTSTRAP_SERVERS and that the broker runs): ")
    assert "Connection refused" in line and "\n" not in line
    out, err = capfd.readouterr()
    assert out == "" and err == ""  # librdkafka's logger is silenced even at log_level 7 (debug)


def test_the_reason_is_librdkafkas_message_without_its_wrapping() -> None:
    error = KafkaError(KafkaError._TRANSPORT, "1.2.3.4:9092/bootstrap: Connect to ipv4#1.2.3.4:9092 failed: "
                       "Connection refused (after 0ms in state CONNECT)")
    assert short_reason(KafkaException(error)) == "1.2.3.4:9092/bootstrap: Connect to ipv4#1.2.3.4:9092 failed: " \
                                                  "Connection refused"


def test_credentials_never_appear_in_the_line() -> None:
    config = {"bootstrap.servers": f"127.0.0.1:{closed_port()}", "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "PLAIN", "sasl.username": "svc", "sasl.password": "s3cret-pa55word"}
    with pytest.raises(BrokerUnreachable) as caught:
        require_broker(config, timeout_s=2.0)
    assert "s3cret-pa55word" not in caught.value.one_line("worker")
