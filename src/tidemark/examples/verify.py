"""Check an example job's committed output against the expectation computed from its input.

Output is read ``read_committed`` from the start of every partition. Exactly-once means: every
expected output record appears once (no duplicate, none missing) and the final values equal the
expectation. The report says which of these failed and how.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import topic_partitions


@dataclass
class Verdict:
    records: int
    expected_records: int
    duplicates: int
    missing: int
    unexpected: int
    final_ok: bool
    details: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.unexpected == 0 and self.final_ok


def read_committed(bootstrap: str, topic: str, *, expect: int, timeout_s: float = 120.0,
                   settle_s: float = 3.0) -> list[dict[str, Any]]:
    """Every committed record of ``topic`` as JSON; waits for ``expect`` records (or the timeout),
    then ``settle_s`` more so duplicates arriving late are seen too."""
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, None))
    deadline = time.monotonic() + timeout_s
    try:
        partitions: list[int] = []
        while not partitions:  # the job creates its output topic when it starts
            partitions = topic_partitions(consumer, topic, 10)
            if not partitions:
                if time.monotonic() > deadline:
                    return []
                time.sleep(0.5)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[dict[str, Any]] = []
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if settle_until is None and (len(values) >= expect or now > deadline):
                settle_until = now + settle_s
            if settle_until is not None and now > settle_until:
                return values
            for record in consumer.consume(num_messages=1000, timeout=0.3):
                if record.error() is None and record.value() is not None:
                    values.append(json.loads(record.value()))
    finally:
        consumer.close()


def _check(identities: list[Any], expected: set[Any]) -> tuple[int, int, int]:
    counts = Counter(identities)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    missing = len(expected - set(counts))
    unexpected = len(set(counts) - expected)
    return duplicates, missing, unexpected


def verify_url_counts(output: list[dict[str, Any]], expected: dict[str, int]) -> Verdict:
    """Each URL's output is exactly 1..n, n its number of input records."""
    want = {(url, i) for url, n in expected.items() for i in range(1, n + 1)}
    duplicates, missing, unexpected = _check([(r["url"], r["hits"]) for r in output], want)
    final: dict[str, int] = {}
    for r in output:
        final[r["url"]] = max(final.get(r["url"], 0), r["hits"])
    verdict = Verdict(len(output), len(want), duplicates, missing, unexpected, final == expected)
    if final != expected:
        wrong = sorted(u for u in set(final) | set(expected) if final.get(u) != expected.get(u))
        verdict.details.append(f"final counts differ for {wrong[:5]}")
    return verdict


def verify_top_urls(output: list[dict[str, Any]], expected: dict[int, tuple[int, list[list[Any]]]]) -> Verdict:
    """Each minute's output is seq 1..n exactly once, and the record with seq n has the final top."""
    want = {(minute, i) for minute, (n, _) in expected.items() for i in range(1, n + 1)}
    duplicates, missing, unexpected = _check([(r["minute"], r["seq"]) for r in output], want)
    finals = {r["minute"]: r["top"] for r in output if r["seq"] == expected.get(r["minute"], (0, None))[0]}
    final_ok = all(finals.get(minute) == top for minute, (_, top) in expected.items())
    verdict = Verdict(len(output), len(want), duplicates, missing, unexpected, final_ok)
    if not final_ok:
        verdict.details.append(f"final top URLs differ: got {finals}, want { {m: t for m, (_, t) in expected.items()} }")
    return verdict


Verifier = Callable[[list[dict[str, Any]], Any], Verdict]
