"""The enrichment example (#35 point 6) on the test harness: each access-log record carries the
owner its URL had at the record's time, whatever the interleaving of records and owner changes,
across a savepoint and a rescale; a deleted owner is None."""

from __future__ import annotations

import json
import random

import pytest

from tidemark.examples.generator import START_MS, generate
from tidemark.examples.url_owners import expected_enriched, owner_changes, url_owners
from tidemark.testing import KeyedProcessFunctionHarness

pytestmark = pytest.mark.unit


def _stream(total: int, chunk: int = 100):
    """(input, key, value, time) in arrival order, as :func:`owner_changes` are meant to be written:
    each change before any record of its time; records shuffled within a chunk."""
    rng = random.Random(9)
    records = list(generate(total, 3, per_minute=250))
    stream, changes = [], []
    for k, first in enumerate(range(0, total, chunk)):
        if k % 2 == 0:
            at_ms = json.loads(records[min(first + chunk, total - 1)])["ts"]
            for url, row, at in owner_changes(k // 2, at_ms):
                changes.append((url, row, at))
                stream.append((1, url.encode(), None if row is None else json.dumps(row).encode(), at))
        part = records[first:first + chunk]
        rng.shuffle(part)
        stream.extend((0, None, r, json.loads(r)["ts"]) for r in part)
    return stream, records, changes


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_each_record_has_the_owner_of_its_time_across_a_savepoint_and_a_rescale(backend: str) -> None:
    stream, records, changes = _stream(2_000)
    job = url_owners()
    newest = START_MS

    def feed(harness: KeyedProcessFunctionHarness, part) -> None:
        nonlocal newest
        for side, key, value, t in part:
            harness.process_record(key, value, input=side, timestamp_ms=t)
            if side == 0:
                newest = max(newest, t)
                harness.advance_watermark(newest - 100 * 240 - 1_001)  # a shuffled chunk behind, at most

    cut = len(stream) // 2
    with KeyedProcessFunctionHarness.for_stage(job, "enrich", parallelism=2, state_backend=backend) as first:
        feed(first, stream[:cut])
        out = first.output_values()
        snapshot = first.snapshot()
    with KeyedProcessFunctionHarness.for_stage(job, "enrich", parallelism=3,
                                               state_backend=backend).restore(snapshot) as second:
        feed(second, stream[cut:])
        second.advance_watermark(newest + 1)  # the inputs idle
        out += second.output_values()
    expected = expected_enriched(records, changes)
    assert {v["ts"]: v for v in out} == expected and len(out) == len(expected)
    owners = [v["owner"] for v in expected.values()]
    assert owners.count(None) > 10 and len(set(owners)) > 3  # owned, changed, deleted
