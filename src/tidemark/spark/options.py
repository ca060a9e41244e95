"""Options of the ``tidemark-kafka`` source and sink, parsed and checked once.

Spark hands a Python data source its options in a case-insensitive dict (keys lower-cased).
Every problem raises :class:`InvalidOptionError`, whose message names the option.
Options starting with ``kafka.`` are passed to librdkafka with the prefix removed (SASL, TLS,
timeouts...), except the ones the source or sink must control itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.spark.offsets import OffsetFormatError, StartingOffsets, StartKind

BOOTSTRAP = "kafka.bootstrap.servers"
_CONTROLLED = {
    "kafka.group.id": "the source reads with assign() and needs no group",
    "kafka.enable.auto.commit": "offsets live in the Spark checkpoint, not in Kafka",
    "kafka.auto.offset.reset": "use startingOffsets",
    "kafka.isolation.level": "use isolationLevel",
    "kafka.transactional.id": "the sink derives it from query, batch and partition",
    "kafka.enable.idempotence": "the sink always writes idempotently in transactions",
}
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


class InvalidOptionError(ValueError):
    """A ``tidemark-kafka`` option is missing or malformed; ``option`` names it."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        super().__init__(f"tidemark-kafka option '{option}': {reason}")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def _required(options: dict[str, str], name: str) -> str:
    value = options.get(name.lower(), "").strip()
    if not value:
        raise InvalidOptionError(name, "is required")
    return value


def _positive_int(options: dict[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidOptionError(name, f"expected a positive integer, got {raw!r}") from None
    if value <= 0:
        raise InvalidOptionError(name, f"expected a positive integer, got {raw!r}")
    return value


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings from ``kafka.*`` options (bootstrap included); rejects controlled keys."""
    lowered = _lower(options)
    config: dict[str, Any] = {"bootstrap.servers": _required(lowered, BOOTSTRAP)}
    for key, value in lowered.items():
        if not key.startswith("kafka.") or key == BOOTSTRAP:
            continue
        if key in _CONTROLLED:
            raise InvalidOptionError(key, f"cannot be set: {_CONTROLLED[key]}")
        config[key[len("kafka."):]] = value
    return config


def _starting(options: dict[str, str], name: str, default: str) -> StartingOffsets:
    raw = options.get(name.lower(), default)
    try:
        return StartingOffsets.parse(raw)
    except OffsetFormatError as exc:
        raise InvalidOptionError(name, f"expected earliest, latest or offset JSON ({exc})") from None


@dataclass(frozen=True, slots=True)
class KafkaSourceOptions:
    """What the source reads and how; built by :meth:`parse`."""

    client: dict[str, Any]
    topics: tuple[str, ...]
    starting: StartingOffsets
    ending: StartingOffsets  # batch reads only; never EARLIEST-only in practice
    max_records_per_trigger: int | None = None
    isolation_level: str = "read_committed"
    arrow_batch_rows: int = 10_000
    read_idle_timeout_ms: int = 30_000
    metadata_timeout_s: float = 10.0
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = True) -> KafkaSourceOptions:
        lowered = _lower(options)
        client = client_config(lowered)
        topics = tuple(t.strip() for t in _required(lowered, "subscribe").split(",") if t.strip())
        if not topics:
            raise InvalidOptionError("subscribe", "names no topic")
        isolation = lowered.get("isolationlevel", "read_committed").strip().lower()
        if isolation not in ISOLATION_LEVELS:
            raise InvalidOptionError("isolationLevel", f"expected one of {ISOLATION_LEVELS}, got {isolation!r}")
        starting = _starting(lowered, "startingOffsets", "latest" if streaming else "earliest")
        ending = _starting(lowered, "endingOffsets", "latest")
        if ending.kind is StartKind.EARLIEST:
            raise InvalidOptionError("endingOffsets", "cannot be earliest")
        for name, spec in (("startingOffsets", starting), ("endingOffsets", ending)):
            unknown = spec.specific.topics() - set(topics)
            if unknown:
                raise InvalidOptionError(name, f"names topics not in subscribe: {sorted(unknown)}")
        return cls(
            client=client,
            topics=topics,
            starting=starting,
            ending=ending,
            max_records_per_trigger=_positive_int(lowered, "maxRecordsPerTrigger", None),
            isolation_level=isolation,
            arrow_batch_rows=_positive_int(lowered, "arrowBatchRows", 10_000) or 10_000,
            read_idle_timeout_ms=_positive_int(lowered, "readIdleTimeoutMs", 30_000) or 30_000,
        )


@dataclass(frozen=True, slots=True)
class KafkaSinkOptions:
    """Where and how the sink writes; built by :meth:`parse`."""

    client: dict[str, Any]
    topic: str | None
    marker_topic: str
    transactional_id_prefix: str = "tidemark-sink"
    transaction_timeout_ms: int = 60_000
    marker_scan_window: int = 1_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaSinkOptions:
        lowered = _lower(options)
        client = client_config(lowered)
        topic = lowered.get("topic", "").strip() or None
        marker_topic = lowered.get("commitmarkertopic", "tidemark-sink-commits").strip()
        if not marker_topic:
            raise InvalidOptionError("commitMarkerTopic", "must not be empty")
        if topic and topic == marker_topic:
            raise InvalidOptionError("commitMarkerTopic", "must differ from topic")
        prefix = lowered.get("transactionalIdPrefix".lower(), "tidemark-sink").strip()
        if not prefix:
            raise InvalidOptionError("transactionalIdPrefix", "must not be empty")
        return cls(
            client=client,
            topic=topic,
            marker_topic=marker_topic,
            transactional_id_prefix=prefix,
            transaction_timeout_ms=_positive_int(lowered, "transactionTimeoutMs", 60_000) or 60_000,
            marker_scan_window=_positive_int(lowered, "commitMarkerScanWindow", 1_000) or 1_000,
        )
