"""Physical truncation of changelog partitions (DeleteRecords), remembering a broker that
refuses it.

Lifecycle: ``PhysicalTruncator(config, ...)`` -> ``delete(offsets)`` whenever partitions should
lose their records before some offsets (blocking; run it off the event loop) -> nothing to close.
``delete`` returns the partitions the broker truncated; it never raises. A broker without
DeleteRecords (the embedded one) answers ``UNSUPPORTED``: that is logged once, counted, and no
request is sent again for ``retry_after_s``, so truncation stays logical without an error loop.
Any other failure is logged (once per distinct error) and retried after ``error_backoff_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import TruncationResult, delete_records_before
from tidemark.chassis.logs import get_logger
from tidemark.services.changelog.metrics import DELETE_RECORDS_UNSUPPORTED
from tidemark.types import TopicPartition

log = get_logger(__name__)


class PhysicalTruncator:
    """DeleteRecords requests with memory of an unsupporting broker and of transient errors."""

    def __init__(self, config: dict[str, Any], *, enabled: bool = True, retry_after_s: float = 600.0,
                 error_backoff_s: float = 30.0, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._config = dict(config)
        self.enabled = enabled
        self.retry_after_s = retry_after_s
        self.error_backoff_s = error_backoff_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._paused_until = 0.0
        self.broker: str = "unknown"  # "supported" | "unsupported" | "unknown"
        self._errors_logged: set[str] = set()

    def delete(self, offsets: Mapping[TopicPartition, int]) -> set[TopicPartition]:
        """Truncate ``offsets`` physically if the broker lets us; the partitions it did."""
        if not self.enabled or not offsets or self._clock() < self._paused_until:
            return set()
        admin = AdminClient(self._config)  # a fresh client: a refusing broker drops the connection
        try:
            result = delete_records_before(admin, dict(offsets), timeout_s=self.timeout_s)
        except KafkaException as exc:
            self._paused_until = self._clock() + self.error_backoff_s
            message = str(exc)
            if message not in self._errors_logged:
                self._errors_logged.add(message)
                log.warning("DeleteRecords failed; truncation stays logical until a retry succeeds",
                            error=message, retry_in_s=self.error_backoff_s)
            return set()
        if result is TruncationResult.UNSUPPORTED:
            DELETE_RECORDS_UNSUPPORTED.inc()
            self._paused_until = self._clock() + self.retry_after_s
            if self.broker != "unsupported":
                log.warning("the broker does not support DeleteRecords: changelog truncation is "
                            "logical (records stay in the topics, nothing before a truncation point "
                            "is read again)", ask_again_in_s=self.retry_after_s)
            self.broker = "unsupported"
            return set()
        self.broker = "supported"
        self._errors_logged.clear()
        return set(offsets)
