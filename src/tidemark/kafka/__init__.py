"""Kafka helpers: topic names, client configuration, admin operations."""
