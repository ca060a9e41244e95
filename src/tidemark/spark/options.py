"""Options of the ``tidemark-kafka`` source and sink, parsed and checked once.

Spark hands a Python data source its options in a case-insensitive dict (keys lower-cased).
Every problem raises :class:`InvalidOptionError`, whose message names the option.
Options starting with ``kafka.`` are passed to librdkafka with the prefix removed (SASL, TLS,
timeouts...), except the ones the source or sink must control itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tidemark.spark.offsets import OffsetFormatError, StartingOffsets, StartKind
from tidemark.types import TopicPartition

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


def _subscribed(options: dict[str, str]) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
    if not topics:
        raise InvalidOptionError("subscribe", "names no topic")
    return topics


def _assigned(options: dict[str, str]) -> frozenset[TopicPartition]:
    """``{"topic": [partition, ...]}`` as (topic, partition) pairs: non-empty lists of partitions >= 0."""
    expected = 'expected JSON {"topic": [partition, ...]}'
    try:
        doc = json.loads(options["assign"])
    except json.JSONDecodeError as exc:
        raise InvalidOptionError("assign", f"{expected} ({exc})") from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError("assign", f"{expected}, got {options['assign']!r}")
    assigned = set()
    for topic, partitions in doc.items():
        if not topic.strip():
            raise InvalidOptionError("assign", "names an empty topic")
        if not isinstance(partitions, list) or not partitions:
            raise InvalidOptionError("assign", f"topic {topic!r}: expected a non-empty list of partitions")
        for partition in partitions:
            if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
                raise InvalidOptionError("assign", f"topic {topic!r}: bad partition {partition!r}")
            assigned.add(TopicPartition(topic, partition))
    return frozenset(assigned)


def _check_named_partitions(name: str, spec: StartingOffsets, topics: tuple[str, ...],
                            assigned: frozenset[TopicPartition] | None) -> None:
    """``startingOffsets``/``endingOffsets`` JSON may name only partitions the source reads."""
    source = "subscribe" if assigned is None else "assign"
    unknown = spec.specific.topics() - set(topics)
    if unknown:
        raise InvalidOptionError(name, f"names topics not in {source}: {sorted(unknown)}")
    if assigned is not None:
        outside = sorted(key for key in spec.specific if key not in assigned)
        if outside:
            names = [f"{topic}/{partition}" for topic, partition in outside]
            raise InvalidOptionError(name, f"names partitions not in assign: {names}")


@dataclass(frozen=True, slots=True)
class KafkaSourceOptions:
    """What the source reads and how; built by :meth:`parse`.

    ``assigned`` is None with ``subscribe`` (every partition of ``topics``, new ones included);
    with ``assign`` it holds exactly the partitions to read, and ``topics`` are their topics.
    """

    client: dict[str, Any]
    topics: tuple[str, ...]
    starting: StartingOffsets
    ending: StartingOffsets  # batch reads only; never EARLIEST-only in practice
    assigned: frozenset[TopicPartition] | None = None
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
        given = [name for name in ("subscribe", "assign") if lowered.get(name, "").strip()]
        if not given:
            raise InvalidOptionError("subscribe", "is required (or 'assign'): give exactly one of them")
        if len(given) == 2:
            raise InvalidOptionError("assign", "cannot be combined with 'subscribe': give exactly one of them")
        assigned = _assigned(lowered) if given == ["assign"] else None
        topics = _subscribed(lowered) if assigned is None else tuple(sorted({t for t, _ in assigned}))
        isolation = lowered.get("isolationlevel", "read_committed").strip().lower()
        if isolation not in ISOLATION_LEVELS:
            raise InvalidOptionError("isolationLevel", f"expected one of {ISOLATION_LEVELS}, got {isolation!r}")
        starting = _starting(lowered, "startingOffsets", "latest" if streaming else "earliest")
        ending = _starting(lowered, "endingOffsets", "latest")
        if ending.kind is StartKind.EARLIEST:
            raise InvalidOptionError("endingOffsets", "cannot be earliest")
        _check_named_partitions("startingOffsets", starting, topics, assigned)
        _check_named_partitions("endingOffsets", ending, topics, assigned)
        return cls(
            client=client,
            topics=topics,
            starting=starting,
            ending=ending,
            assigned=assigned,
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
