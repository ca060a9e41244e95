"""Dead letters: a record that cannot be decoded or processed is logged, counted, published with
its origin to the dead-letter topic, and skipped. It never crashes a service or blocks a partition.

A dead letter is never larger than the broker accepts: :func:`dead_letter` keeps the error text
to :data:`ERROR_TEXT_LIMIT` characters (lone surrogates and other unencodable characters
escaped), and when the encoded letter plus its Kafka key would exceed ``max_bytes`` the record's
value, key and headers are cut, largest first. Each cut part keeps a prefix (headers are
dropped whole) and its original size and SHA-256 are recorded in ``original_sizes`` /
``original_sha256`` (DeadLetter v2), so an operator can still match it to the source record.
The headers' digest covers, in name order, each name, a NUL byte, the value and a NUL byte.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tidemark.clock import now_ms
from tidemark.protocol import codec
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.protocol.errors import DecodeError
from tidemark.chassis.logs import get_logger
from tidemark.chassis.metrics import DEAD_LETTERS

log = get_logger(__name__)

PROCESSING_FAILED = "processing-failed"
ERROR_TEXT_LIMIT = 2000
MAX_DEAD_LETTER_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``; the broker's default limit is slightly larger."""
_RECORD_OVERHEAD = 512  # record and batch framing around the key and value, with room to spare


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


class ProcessingError(Exception):
    """A failure whose kind is known (``reason``, a fixed word, used as a metric label)."""

    reason = PROCESSING_FAILED


class RejectedRecord(ProcessingError):
    """A record that decoded but breaks a rule of the service reading it (e.g. a registration
    whose worker assignment does not fit its tasks): dead-lettered like any failure, and logged
    with its reason but without a traceback, since no code failed."""


def reason_of(error: BaseException) -> str:
    return error.reason if isinstance(error, (DecodeError, ProcessingError)) else PROCESSING_FAILED


def error_text(error: BaseException | str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """``error`` as text of at most ``limit`` characters that always encodes as UTF-8."""
    text = str(error)
    if len(text) > limit:
        text = f"{text[:limit - 30]}... ({len(text)} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:limit]


def dead_letter(record: RawRecord, error: BaseException, service: str,
                max_bytes: int = MAX_DEAD_LETTER_BYTES) -> DeadLetter:
    """The dead-letter message for ``record`` that failed with ``error``, cut to ``max_bytes``
    (see the module docstring)."""
    letter = DeadLetter(
        origin_topic=record.topic,
        origin_partition=record.partition,
        origin_offset=record.offset,
        origin_timestamp=record.timestamp,
        key=record.key,
        value=record.value,
        headers=dict(record.headers),
        error_type=error_text(reason_of(error), 200),
        error_message=error_text(error),
        service=service,
        failed_at=now_ms(),
    )
    return fit(letter, max_bytes)


def published_size(letter: DeadLetter) -> int:
    """Bytes the letter takes on the dead-letter topic: encoded value, its key and framing."""
    return len(codec.encode(letter)) + len(letter.key or b"") + _RECORD_OVERHEAD


def fit(letter: DeadLetter, max_bytes: int = MAX_DEAD_LETTER_BYTES) -> DeadLetter:
    """``letter`` with its largest parts (value, key, headers) cut until it fits ``max_bytes``."""
    sizes = {"value": len(letter.value or b""), "key": 2 * len(letter.key or b""),
             "headers": sum(len(k) + len(v) for k, v in letter.headers.items())}
    for part in sorted(sizes, key=lambda p: -sizes[p]):
        excess = published_size(letter) - max_bytes
        if excess <= 0:
            return letter
        letter = _cut(letter, part, excess)
    if published_size(letter) > max_bytes:
        raise ValueError(f"a dead letter of {letter.origin_topic} does not fit {max_bytes} bytes even when cut")
    return letter


def _cut(letter: DeadLetter, part: str, excess: int) -> DeadLetter:
    if part == "headers":
        if not letter.headers:
            return letter
        original = b"".join(name.encode() + b"\0" + value + b"\0" for name, value in sorted(letter.headers.items()))
        changes: dict[str, object] = {"headers": {}}
    else:
        original = getattr(letter, part)
        if not original:
            return letter
        # a part of the key counts twice (in the letter and as the record key)
        keep = max(0, len(original) - (excess // 2 if part == "key" else excess) - 256)
        changes = {part: original[:keep]}
    sizes = {**letter.original_sizes, part: len(original)}
    digests = {**letter.original_sha256, part: hashlib.sha256(original).hexdigest()}
    return replace(letter, **changes, original_sizes=sizes, original_sha256=digests)  # type: ignore[arg-type]


def record_failure(record: RawRecord, error: BaseException, service: str,
                   max_bytes: int = MAX_DEAD_LETTER_BYTES) -> DeadLetter:
    """Log and count a failed record; return the dead letter to publish."""
    reason = reason_of(error)
    DEAD_LETTERS.labels(service=service, topic=record.topic, reason=reason).inc()
    log.warning(
        "record sent to dead letters",
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        reason=reason,
        error=error_text(error, 500),
        exc_info=not isinstance(error, (DecodeError, RejectedRecord)),
    )
    return dead_letter(record, error, service, max_bytes)
