"""Kafka security settings are mapped once (``kafka_security``) and both client stacks of a
service, librdkafka and Faust/aiokafka, derive the same connection from them."""

from __future__ import annotations

import ssl

import certifi
import faust
import pytest

from tidemark.config.settings import KafkaSettings, TidemarkSettings
from tidemark.kafka.clients import base_config, kafka_security
from tidemark.chassis.app import _faust_credentials


def _settings(**kafka: object) -> TidemarkSettings:
    return TidemarkSettings(kafka=KafkaSettings(**kafka))


def _faust_protocol(credentials: object) -> str:
    if credentials is None:
        return "PLAINTEXT"
    if isinstance(credentials, ssl.SSLContext):
        return "SSL"
    assert isinstance(credentials, faust.SASLCredentials)
    return "SASL_SSL" if credentials.ssl_context is not None else "SASL_PLAINTEXT"


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_both_client_stacks_connect_the_same_way(protocol: str) -> None:
    settings = _settings(security_protocol=protocol, sasl_mechanism="SCRAM-SHA-512", sasl_username="svc",
                         sasl_password="pw", ssl_ca_location=certifi.where())
    security = kafka_security(settings)
    librdkafka = base_config(settings, "broker:9093")
    credentials = _faust_credentials(security)
    assert librdkafka["security.protocol"] == _faust_protocol(credentials) == protocol
    if protocol.startswith("SASL"):
        assert (librdkafka["sasl.mechanism"], librdkafka["sasl.username"], librdkafka["sasl.password"]) == (
            "SCRAM-SHA-512", "svc", "pw")
        assert (credentials.mechanism.value, credentials.username, credentials.password) == ("SCRAM-SHA-512", "svc", "pw")
    else:
        assert not any(key.startswith("sasl.") for key in librdkafka)  # no SASL keys without a SASL protocol
    assert librdkafka.get("ssl.ca.location") == (certifi.where() if protocol.endswith("SSL") else None)
    assert "pw" not in repr(security)


def test_sasl_without_a_mechanism_is_plain_for_both_stacks() -> None:
    settings = _settings(security_protocol="SASL_PLAINTEXT", sasl_username="svc", sasl_password="pw")
    assert base_config(settings, "b:1")["sasl.mechanism"] == "PLAIN"  # librdkafka's own default is GSSAPI
    assert _faust_credentials(kafka_security(settings)).mechanism.value == "PLAIN"



def test_clients_try_a_broker_again_within_a_quarter_of_a_second() -> None:
    from confluent_kafka import Producer

    config = base_config(_settings(), "broker:9093")
    assert config["reconnect.backoff.max.ms"] <= 250 and config["retry.backoff.max.ms"] <= 250
    assert "metadata.recovery.strategy" not in config  # librdkafka's re-bootstrap stays on
    Producer(config).flush(0)  # librdkafka takes every property (it refuses an unknown one here)
