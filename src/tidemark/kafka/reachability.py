"""Whether Kafka can be reached at all when a process starts: the one start-up probe.

A process that has never reached the broker has nothing to ride through (that is
:mod:`tidemark.kafka.outage`, for a broker lost *after* the start); a wrong
``KAFKA_BOOTSTRAP_SERVERS`` or a broker that is not running must end the start with one line
naming the address and what to check, not with librdkafka's per-attempt log lines and a
traceback. Every entry point that needs Kafka calls :func:`require_broker` first; on failure it
prints :meth:`BrokerUnreachable.one_line` and exits with ``tidemark.exit_codes.EXIT_UNREACHABLE``.

The probe is a Metadata request naming one topic (:func:`tidemark.kafka.metadata.brokers_listed`),
repeated until ``timeout_s``; librdkafka's own logger is silenced during it and its errors are
collected through ``error_cb``, so the last one becomes the reason.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import brokers_listed

REACH_TIMEOUT_S = 15.0
ATTEMPT_S = 2.0
HINT = "check KAFKA_BOOTSTRAP_SERVERS and that the broker runs"

_SILENT = logging.getLogger("tidemark.kafka.reachability.librdkafka")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False
_SILENT.setLevel(logging.CRITICAL + 1)


class BrokerUnreachable(ConnectionError):
    """No broker answered at ``bootstrap`` within the probe's time; ``reason`` is librdkafka's
    last error, shortened (it never holds credentials)."""

    def __init__(self, bootstrap: str, reason: str) -> None:
        super().__init__(f"cannot reach Kafka at {bootstrap} ({HINT}): {reason}")
        self.bootstrap = bootstrap
        self.reason = reason

    def one_line(self, component: str) -> str:
        return f"tidemark {component}: {self}"


def short_reason(error: KafkaError | KafkaException | BaseException | str) -> str:
    """librdkafka's message without its ``KafkaError{...}`` wrapping and state suffixes."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    text = error.str() if isinstance(error, KafkaError) else str(error)
    text = text.split(" (after ", 1)[0]  # "(after 0ms in state CONNECT)"
    return " ".join(text.split()) or "no answer"


def require_broker(client: dict[str, Any], timeout_s: float = REACH_TIMEOUT_S) -> int:
    """Return how many brokers the cluster lists, or raise :class:`BrokerUnreachable` when none
    answered at ``client['bootstrap.servers']`` within ``timeout_s``."""
    bootstrap = str(client["bootstrap.servers"])
    errors: list[KafkaError] = []
    config = consumer_config({k: v for k, v in client.items() if k not in ("logger", "error_cb")}, None,
                             logger=_SILENT, error_cb=errors.append)
    try:
        probe = Consumer(config)
    except KafkaException as exc:  # a malformed address or setting librdkafka refuses outright
        raise BrokerUnreachable(bootstrap, short_reason(exc)) from None
    deadline = time.monotonic() + timeout_s
    last: KafkaError | KafkaException | str = "no broker answered"
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                listed = brokers_listed(probe, min(ATTEMPT_S, remaining))
            except KafkaException as exc:
                last = exc
            else:
                if listed:
                    return listed
            if errors:
                last = errors[-1]
                if last.fatal() or last.code() == KafkaError._AUTHENTICATION:
                    break  # will not get better by waiting
    finally:
        probe.close()
    raise BrokerUnreachable(bootstrap, short_reason(errors[-1] if errors else last))
