"""Client configuration for confluent-kafka (librdkafka) and Faust (aiokafka).

Group settings keep a consumer-group join (the consumers that use a group) at a few seconds, on
the embedded broker and on Apache Kafka alike. How a client
authenticates and encrypts is decided once, by :func:`kafka_security`, from the ``kafka`` settings;
:func:`base_config` turns that into librdkafka keys, :mod:`tidemark.chassis.app` into Faust's
credentials and :func:`java_security` into the Java client's keys (Spark's Kafka connector), so
every client stack connects the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tidemark.config.settings import ConfigurationError, TidemarkSettings

GROUP_SETTINGS: dict[str, Any] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "max.poll.interval.ms": 10000,
}

# librdkafka's own log lines (stderr) at syslog level 2 (critical) and above only: during a broker
# outage every client would log each failed connection attempt. The outage is reported once per
# process instead ("waiting for the broker", tidemark.kafka.outage), and failed operations raise
# with librdkafka's error.
LIBRDKAFKA_LOG_LEVEL = 2

# After a broker outage a client tries again within a quarter of a second (librdkafka's defaults
# grow the waits to 10 s between connection attempts and 1 s between retries of a request).
# librdkafka's re-bootstrap when no broker answers stays on: without it (metadata.recovery.strategy
# none) a transaction committed sooner after a restarted broker was served (0.1-0.5 s instead of
# 1-1.4 s), but a stage's transactional producer stayed stuck after a 34 s broker pause.
RECONNECT_BACKOFF = {"reconnect.backoff.max.ms": 250, "retry.backoff.max.ms": 250}


@dataclass(frozen=True, slots=True)
class KafkaSecurity:
    """How a client authenticates and encrypts, in no client library's terms.

    ``protocol`` is Kafka's ``security.protocol``; ``tls`` is true for SSL and SASL_SSL, with
    ``ca_location`` the CA bundle to trust (None: the system's); ``sasl_mechanism`` is set for
    SASL_PLAINTEXT and SASL_SSL only (PLAIN unless configured), with the username and password.
    """

    protocol: str
    tls: bool
    ca_location: str | None
    sasl_mechanism: str | None
    sasl_username: str | None
    sasl_password: str | None = field(default=None, repr=False)


def kafka_security(settings: TidemarkSettings) -> KafkaSecurity:
    """The one mapping from the ``kafka`` settings to a client's security settings."""
    kafka = settings.kafka
    tls = kafka.security_protocol in ("SSL", "SASL_SSL")
    sasl = kafka.security_protocol.startswith("SASL")
    return KafkaSecurity(
        protocol=kafka.security_protocol,
        tls=tls,
        ca_location=kafka.ssl_ca_location if tls else None,
        sasl_mechanism=(kafka.sasl_mechanism or "PLAIN") if sasl else None,
        sasl_username=kafka.sasl_username if sasl else None,
        sasl_password=kafka.sasl_password if sasl else None,
    )


def librdkafka_security(security: KafkaSecurity) -> dict[str, Any]:
    """``security`` as librdkafka configuration keys."""
    config: dict[str, Any] = {"security.protocol": security.protocol}
    if security.sasl_mechanism:
        config["sasl.mechanism"] = security.sasl_mechanism
        config["sasl.username"] = security.sasl_username or ""
        config["sasl.password"] = security.sasl_password or ""
    if security.ca_location:
        config["ssl.ca.location"] = security.ca_location
    return config


_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule"}
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _jaas_string(value: str | None) -> str:
    escaped = (value or "").replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def java_security(security: KafkaSecurity) -> dict[str, str]:
    """``security`` as the Java client's configuration keys (Spark's Kafka connector)."""
    config = {"security.protocol": security.protocol}
    if security.sasl_mechanism:
        module = _JAAS_MODULES.get(security.sasl_mechanism, _SCRAM_MODULE)
        config["sasl.mechanism"] = security.sasl_mechanism
        config["sasl.jaas.config"] = (f"{module} required username={_jaas_string(security.sasl_username)} "
                                      f"password={_jaas_string(security.sasl_password)};")
    if security.ca_location:
        config["ssl.truststore.type"] = "PEM"
        config["ssl.truststore.location"] = security.ca_location
    return config


def resolve_bootstrap(settings: TidemarkSettings) -> str:
    """``KAFKA_BOOTSTRAP_SERVERS`` when set, else the running embedded broker under home."""
    if settings.bootstrap_servers:
        return settings.bootstrap_servers
    from tidemark.broker.embedded import EmbeddedBroker  # only without a named Kafka: a service's start skips it

    status = EmbeddedBroker(settings.home / "broker").status()
    if status.running and status.bootstrap_servers:
        return status.bootstrap_servers
    raise ConfigurationError(
        [
            (
                "KAFKA_BOOTSTRAP_SERVERS",
                "unset and no embedded broker is running under "
                f"{settings.home / 'broker'} (start one with `tidemark broker start`)",
            )
        ]
    )


def base_config(settings: TidemarkSettings, bootstrap: str | None = None) -> dict[str, Any]:
    """librdkafka settings shared by producers, consumers and admin clients."""
    return {
        "bootstrap.servers": bootstrap or resolve_bootstrap(settings),
        **librdkafka_security(kafka_security(settings)),
        **RECONNECT_BACKOFF,
        "log_level": LIBRDKAFKA_LOG_LEVEL,
    }


def consumer_config(base: dict[str, Any], group_id: str | None, **extra: Any) -> dict[str, Any]:
    """A consumer reading committed data only; group settings tuned for fast joins."""
    config = {
        **base,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    if group_id:
        config.update(GROUP_SETTINGS, **{"group.id": group_id})
    else:
        config["group.id"] = "tidemark-unused"  # librdkafka requires one even in assign() mode
    config.update(extra)
    return config


def produce_waiting(producer: Any, topic: str, **kwargs: Any) -> None:
    """``producer.produce(topic, **kwargs)``, waiting (serving delivery reports) while the local
    queue is full instead of failing with ``BufferError``."""
    while True:
        try:
            producer.produce(topic, **kwargs)
            return
        except BufferError:
            producer.poll(0.05)


def produce_all(producer: Any, topic: str, records: Iterable[tuple[Any, ...]],
                headers: list[tuple[str, bytes]] | None = None) -> None:
    """Produce every ``(key, value, ...)`` of ``records`` to ``topic`` (the producer partitions
    them; what follows the value is left unread), with ``headers`` on each, waiting while the
    local queue is full as :func:`produce_waiting` does; the per-record path of the sinks, so one
    C call per record and nothing else."""
    produce, poll = producer.produce, producer.poll
    for record in records:
        while True:
            try:
                if headers is None:
                    produce(topic, record[1], record[0])
                else:
                    produce(topic, record[1], record[0], headers=headers)
                break
            except BufferError:
                poll(0.05)


def producer_config(base: dict[str, Any], transactional_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """An idempotent producer; transactional when ``transactional_id`` is given."""
    config = {**base, "enable.idempotence": True, "acks": "all", "linger.ms": 5}
    if transactional_id:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = 60000
    config.update(extra)
    return config
