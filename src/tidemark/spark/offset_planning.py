"""Offset planning for the Kafka source, as plain Python the worker runtime can reuse.

``plan_latest`` answers "up to where may the next micro-batch read": the end of every
partition as the broker reports it for the isolation level (the last stable offset under
read_committed), never below the start (a planned offset must be one the reader really
reaches), capped by an optional record budget spread fairly across partitions.

Reported ends are taken as they are, even when short (the embedded broker under-reports the
end after non-transactional batched produce): records beyond a planned end are read by a later
batch, so a short end delays records and never loses or repeats them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from confluent_kafka import Consumer

from tidemark.kafka.metadata import TopicNotFoundError, list_partitions, topic_partitions, watermarks
from tidemark.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    StartingOffsets,
    StartKind,
)
from tidemark.types import TopicPartition


def source_partitions(
    consumer: Consumer, topics: Iterable[str], assigned: Collection[TopicPartition] | None = None,
    timeout_s: float = 10.0,
) -> list[TopicPartition]:
    """The partitions the source reads, sorted: every partition of ``topics`` as the broker lists
    it now (``subscribe``), or exactly ``assigned`` (``assign``; ``topics`` are then its topics).

    Raises TopicNotFoundError naming the option and the missing topics or assigned partitions.
    """
    if assigned is None:
        return list_partitions(consumer, topics, timeout_s)
    existing = {topic: set(topic_partitions(consumer, topic, timeout_s)) for topic in sorted({t for t, _ in assigned})}
    missing_topics = [topic for topic, found in existing.items() if not found]
    if missing_topics:
        raise TopicNotFoundError(f"tidemark-kafka option 'assign': topic(s) not found: {missing_topics}")
    missing = sorted((topic, partition) for topic, partition in assigned if partition not in existing[topic])
    if missing:
        names = [f"{topic}/{partition}" for topic, partition in missing]
        counts = {topic: len(existing[topic]) for topic, _ in missing}
        raise TopicNotFoundError(f"tidemark-kafka option 'assign': partition(s) not found: {names} "
                                 f"(partitions per topic: {counts})")
    return sorted(assigned)


def resolve_starting(
    consumer: Consumer, topics: Iterable[str], starting: StartingOffsets, timeout_s: float = 10.0,
    *, assigned: Collection[TopicPartition] | None = None,
) -> PartitionOffsets:
    """Concrete offsets for every partition the source reads (earliest, latest or the JSON's);
    see :func:`source_partitions` for ``topics`` and ``assigned``."""
    marks = watermarks(consumer, source_partitions(consumer, topics, assigned, timeout_s), timeout_s)
    resolved = {}
    for key, (low, high) in marks.items():
        wanted = {StartKind.EARLIEST: EARLIEST, StartKind.LATEST: LATEST}.get(starting.kind)
        if wanted is None:
            wanted = starting.specific.get(key, EARLIEST)
        if wanted == EARLIEST:
            resolved[key] = low
        elif wanted == LATEST:
            resolved[key] = high
        else:
            resolved[key] = wanted
    return PartitionOffsets.of(resolved.items())


def fair_budget(backlog: Mapping[TopicPartition, int], limit: int) -> dict[TopicPartition, int]:
    """Split ``limit`` offsets over partitions by water-filling: every partition gets an equal
    share, shares a partition cannot use go to the others; leftovers go in partition order.
    """
    grant = {key: 0 for key in backlog}
    open_keys = sorted(key for key, size in backlog.items() if size > 0)
    remaining = limit
    while open_keys and remaining > 0:
        share = max(1, remaining // len(open_keys))
        for key in list(open_keys):
            if remaining == 0:
                break
            take = min(share, backlog[key] - grant[key], remaining)
            grant[key] += take
            remaining -= take
            if grant[key] >= backlog[key]:
                open_keys.remove(key)
    return grant


def plan_latest(
    consumer: Consumer,
    topics: Iterable[str],
    start: PartitionOffsets,
    max_records: int | None = None,
    cap: PartitionOffsets | None = None,
    timeout_s: float = 10.0,
    *,
    assigned: Collection[TopicPartition] | None = None,
) -> PartitionOffsets:
    """End offsets of the next batch after ``start``, for the partitions of
    :func:`source_partitions` (``topics``, or only ``assigned``): only those are in the result.

    Partitions absent from ``start`` (new ones) start at their earliest offset. Each end is
    ``max(start, reported end)``, lowered to ``cap`` when given (Trigger.AvailableNow target),
    and the total offset span is limited to ``max_records`` when given. Offsets of committed
    records are not contiguous under transactions, so a span of N offsets holds at most N records.
    """
    marks = watermarks(consumer, source_partitions(consumer, topics, assigned, timeout_s), timeout_s)
    begin = {key: start.get(key, low) for key, (low, _) in marks.items()}
    latest = {}
    for key, (_, high) in marks.items():
        end = max(begin[key], high)
        if cap is not None:  # partitions unknown to the cap appeared later: not read under it
            end = max(begin[key], min(end, cap.get(key, begin[key])))
        latest[key] = end
    if max_records is not None:
        grant = fair_budget({key: latest[key] - begin[key] for key in latest}, max_records)
        latest = {key: begin[key] + grant[key] for key in latest}
    return PartitionOffsets.of(latest.items())


def plan_ranges(consumer: Consumer, start: PartitionOffsets, end: PartitionOffsets,
                timeout_s: float = 10.0) -> list[OffsetRange]:
    """One non-empty range per partition between two planned offsets (new partitions from earliest)."""
    new = [key for key in end if key not in start]
    lows = {key: low for key, (low, _) in watermarks(consumer, new, timeout_s).items()} if new else {}
    ranges = []
    for key in end:
        begin = start.get(key)
        if begin is None:
            begin = lows[key]
        if end[key] > begin:
            ranges.append(OffsetRange(key[0], key[1], begin, end[key]))
    return ranges
