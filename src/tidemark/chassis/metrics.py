"""Metrics every service and worker exposes (names are the contract in docs/operations.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Info

BUILD_INFO = Info("tidemark_build", "Version of the running Tidemark process", ["service"])
SERVICE_READY = Gauge("tidemark_service_ready", "1 when the service's consumers are assigned", ["service"])
MESSAGES_CONSUMED = Counter(
    "tidemark_messages_consumed_total", "Records consumed and decoded", ["service", "topic"]
)
DEAD_LETTERS = Counter(
    "tidemark_dead_letters_total",
    "Records that could not be decoded or processed, sent to the dead-letter topic",
    ["service", "topic", "reason"],
)
