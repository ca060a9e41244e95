"""Check a job's output topic for exactly-once: read it read_committed and compare it with an
expectation (:mod:`tidemark.verification.comparison`). What ``tidemark verify`` and the demo run."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from tidemark.verification.committed_reader import CommittedReader, CommittedRecord, UnknownTopic, collect
from tidemark.verification.comparison import Verdict, compare
from tidemark.verification.expectation_file import decode_record

Identify = Callable[[str | None, Any], Hashable]
"""The identity of one output record from its key (text) and decoded value."""


def identified(records: list[CommittedRecord], identify: Identify) -> list[tuple[Hashable, Any]]:
    pairs = []
    for record in records:
        key, value = decode_record(record.key, record.value)
        pairs.append((identify(key, value), value))
    return pairs


def check_output(client: dict[str, Any], topic: str, expected: Mapping[Hashable, Any], identify: Identify, *,
                 wait_s: float = 0.0, settle_s: float = 0.0) -> Verdict:
    """Read ``topic`` and compare. With ``wait_s`` > 0, wait up to that long for the topic to
    exist and for the output to match the expectation, then read ``settle_s`` more before the
    final comparison (late duplicates); with 0, compare what the topic holds now. Raises
    UnknownTopic when the topic does not exist (within ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    with CommittedReader(client, topic) as reader:
        if not reader.open(wait_s):
            raise UnknownTopic(topic)
        records = collect(reader, until=lambda read: compare(identified(read, identify), expected).exactly_once,
                          wait_s=max(deadline - time.monotonic(), 0.0), settle_s=settle_s)
    return compare(identified(records, identify), expected)
