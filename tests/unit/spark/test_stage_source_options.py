"""A stage's source options for both sources (``tidemark.spark.stage_source``), which source a
setting picks, the connector's jars and the Java client's security keys (no broker, no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import java_security, kafka_security
from tidemark.spark.kafka_connector import artifact_name, missing_jars
from tidemark.spark.options import KafkaSourceOptions
from tidemark.spark.stage_source import ReadSelection, SparkKafkaSource, TidemarkKafkaSource, source_kind

SUBSCRIBED = ReadSelection(("a", "b"), (("a", 0), ("a", 1), ("b", 0)), max_records=500)
ASSIGNED = ReadSelection(("a",), (("a", 2), ("a", 0)), assigned=True, positions={("a", 2): 17})


def _connector() -> SparkKafkaSource:
    return SparkKafkaSource("h:9092", {"security.protocol": "SSL"}, ["/j/x.jar", "/j/y.jar"])


def test_the_python_source_gets_librdkafka_settings_and_parses_its_own_options() -> None:
    source = TidemarkKafkaSource({"bootstrap.servers": "h:9092", "security.protocol": "SSL"})
    parsed = KafkaSourceOptions.parse(source.options(ASSIGNED))
    assert source.format == "tidemark-kafka" and source.session_conf() == {}
    assert parsed.assigned == {("a", 0), ("a", 2)}
    assert parsed.client == {"bootstrap.servers": "h:9092", "security.protocol": "SSL"}
    assert json.loads(source.options(ASSIGNED)["startingOffsets"]) == {"a": {"2": 17}}
    assert source.options(SUBSCRIBED)["subscribe"] == "a,b"
    assert source.options(SUBSCRIBED)["startingOffsets"] == "earliest"
    assert source.options(SUBSCRIBED)["maxRecordsPerTrigger"] == "500"


def test_the_connector_reads_committed_records_with_headers_and_waits_through_outages() -> None:
    options = _connector().options(SUBSCRIBED)
    assert options["kafka.bootstrap.servers"] == "h:9092" and options["kafka.security.protocol"] == "SSL"
    assert options["kafka.isolation.level"] == "read_committed" and options["includeHeaders"] == "true"
    assert int(options["kafka.fetch.max.wait.ms"]) <= 50  # not 500 ms at each range's commit marker
    assert options["subscribe"] == "a,b" and "assign" not in options
    assert options["maxOffsetsPerTrigger"] == "500" and options["startingOffsets"] == "earliest"
    assert int(options["kafka.default.api.timeout.ms"]) >= 120_000  # a broker outage of minutes
    assert int(options["kafkaConsumer.pollTimeoutMs"]) >= 120_000
    assert _connector().session_conf() == {"spark.jars": "/j/x.jar,/j/y.jar"}


def test_the_connector_looks_offsets_up_again_every_second_through_an_outage() -> None:
    options = _connector().options(SUBSCRIBED)
    assert int(options["fetchOffset.retryIntervalMs"]) <= 1000  # the driver's offset lookups: not 5 s
    patience_ms = int(options["fetchOffset.numRetries"]) * int(options["fetchOffset.retryIntervalMs"])
    assert patience_ms >= 120_000  # still waits through an outage of minutes


def test_the_connector_names_every_partition_once_a_position_is_restored() -> None:
    options = _connector().options(ASSIGNED)
    assert json.loads(options["assign"]) == {"a": [0, 2]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": -2, "2": 17}}  # -2: the earliest
    subscribed = ReadSelection(("a",), (("a", 0), ("a", 1)), positions={("a", 1): 3})
    assert json.loads(_connector().options(subscribed)["startingOffsets"]) == {"a": {"0": -2, "1": 3}}


@pytest.mark.parametrize(("source", "engine", "kind"), [
    ("auto", "kafka", "kafka"),
    ("auto", "tansu", "tidemark-kafka"),
    ("tidemark-kafka", "kafka", "tidemark-kafka"),
    ("kafka", "tansu", "kafka"),
])
def test_the_setting_picks_the_source(monkeypatch: pytest.MonkeyPatch, source: str, engine: str, kind: str) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__SOURCE", source)
    monkeypatch.setenv("TIDEMARK_BROKER_ENGINE", engine)
    assert source_kind(TidemarkSettings()) == kind


def test_a_misspelled_source_fails_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__SOURCE", "spark-kafka")
    with pytest.raises(Exception) as info:
        TidemarkSettings()
    assert "source" in str(info.value)


def test_only_the_jars_spark_does_not_ship_are_added() -> None:
    assert artifact_name("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert artifact_name("spark-sql-kafka-0-10_2.13-4.2.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert artifact_name("commons-pool2-2.13.1.jar") == "commons-pool2"
    fetched = [Path(f"/c/{name}") for name in (
        "spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-token-provider-kafka-0-10_2.13-4.2.0.jar",
        "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar", "spark-tags_2.13-4.2.0.jar",
        "lz4-java-1.10.1.jar", "slf4j-api-1.7.36.jar")]
    shipped = ["spark-tags_2.13-4.3.0.jar", "lz4-java-1.11.0.jar", "slf4j-api-2.0.17.jar", "commons-pool-1.5.4.jar"]
    assert [p.name for p in missing_jars(fetched, shipped)] == [
        "commons-pool2-2.13.1.jar", "kafka-clients-3.9.2.jar", "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        "spark-token-provider-kafka-0-10_2.13-4.2.0.jar"]


def test_java_clients_connect_as_the_other_client_stacks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("TIDEMARK_KAFKA__SASL_MECHANISM", "SCRAM-SHA-512")
    monkeypatch.setenv("TIDEMARK_KAFKA__SASL_USERNAME", 'ann"a')
    monkeypatch.setenv("TIDEMARK_KAFKA__SASL_PASSWORD", "p\\w")
    monkeypatch.setenv("TIDEMARK_KAFKA__SSL_CA_LOCATION", "/etc/ca.pem")
    config = java_security(kafka_security(TidemarkSettings()))
    assert config == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                            'username="ann\\"a" password="p\\\\w";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
    }
    monkeypatch.setenv("TIDEMARK_KAFKA__SECURITY_PROTOCOL", "PLAINTEXT")
    assert java_security(kafka_security(TidemarkSettings())) == {"security.protocol": "PLAINTEXT"}
