"""Dead letters: a record that cannot be decoded or processed is logged, counted, published with
its origin to the dead-letter topic, and skipped. It never crashes a service or blocks a partition.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tidemark.protocol.errors import DecodeError
from tidemark.protocol.messages import DeadLetter
from tidemark.service.logs import get_logger
from tidemark.service.metrics import DEAD_LETTERS

log = get_logger(__name__)

PROCESSING_FAILED = "processing-failed"


@dataclass(frozen=True, slots=True)
class RawRecord:
    """A consumed record as it was on the wire, whatever client read it."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: Mapping[str, bytes]


def headers_of(raw: Sequence[tuple[str, bytes | None]] | Mapping[str, bytes] | None) -> dict[str, bytes]:
    """Normalise Kafka headers (list of pairs or mapping) to ``{name: bytes}``."""
    if not raw:
        return {}
    items = raw.items() if isinstance(raw, Mapping) else raw
    return {str(k): bytes(v or b"") for k, v in items}


def reason_of(error: BaseException) -> str:
    return error.reason if isinstance(error, DecodeError) else PROCESSING_FAILED


def dead_letter(record: RawRecord, error: BaseException, service: str) -> DeadLetter:
    """The dead-letter message for ``record`` that failed with ``error``."""
    return DeadLetter(
        origin_topic=record.topic,
        origin_partition=record.partition,
        origin_offset=record.offset,
        origin_timestamp=record.timestamp,
        key=record.key,
        value=record.value,
        headers=dict(record.headers),
        error_type=reason_of(error),
        error_message=str(error)[:2000],
        service=service,
        failed_at=int(time.time() * 1000),
    )


def record_failure(record: RawRecord, error: BaseException, service: str) -> DeadLetter:
    """Log and count a failed record; return the dead letter to publish."""
    reason = reason_of(error)
    DEAD_LETTERS.labels(service=service, topic=record.topic, reason=reason).inc()
    log.warning(
        "record sent to dead letters",
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        reason=reason,
        error=str(error)[:500],
        exc_info=not isinstance(error, DecodeError),
    )
    return dead_letter(record, error, service)
