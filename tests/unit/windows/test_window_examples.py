"""The window examples (:mod:`tidemark.examples.access_log_windows`) through the test harness on
generated access-log records: their output equals the independent computations the end-to-end
tests verify against (sessions, sliding counts) and, for the top URLs on windows, the
expectation of the hand-built ``top_urls`` job."""

from __future__ import annotations

import json

import pytest

from tidemark.examples.access_log_windows import sessions, sliding_url_counts, windowed_top_urls
from tidemark.examples.generator import expected_top_urls, final_watermark, generate
from tidemark.examples.verify import (
    sessions_expectation,
    sliding_url_counts_expectation,
    verify_top_urls,
    verify_example,
)
from tidemark.testing import KeyedProcessFunctionHarness as Harness

RECORDS = list(generate(3_000, seed=34, per_minute=400))


def run_stage(job, stage: str, values: list[tuple[dict, int]], watermark: int, backend: str) -> list:
    """Every value through the stage in order, then the final watermark; what it emitted."""
    with Harness.for_stage(job, stage, state_backend=backend) as harness:
        for value, ts in values:
            harness.process(value, timestamp_ms=ts)
        harness.advance_watermark(watermark)
        return list(harness.output)


def source_values() -> list[tuple[dict, int]]:
    return [(value, value["ts"]) for value in map(json.loads, RECORDS)]


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_sessions_are_the_independent_computation(backend) -> None:
    gap = 90_000
    job = sessions(input_topic="in", gap_ms=gap)
    out = run_stage(job, "sessions", source_values(), final_watermark(RECORDS), backend)
    expected = sessions_expectation(RECORDS, gap)
    assert len(expected) > 300 and any(e["requests"] > 2 for e in expected.values())
    verdict = verify_example("sessions", [e.decoded() for e in out], expected)
    assert verdict.exactly_once and verdict.records == verdict.expected_records, verdict


def test_sliding_counts_are_the_independent_computation() -> None:
    job = sliding_url_counts(input_topic="in", size_ms=120_000, slide_ms=30_000)
    out = run_stage(job, "url_windows", source_values(), final_watermark(RECORDS), "heap")
    expected = sliding_url_counts_expectation(RECORDS, 120_000, 30_000)
    verdict = verify_example("sliding_url_counts", [e.decoded() for e in out], expected)
    assert verdict.exactly_once and verdict.records == verdict.expected_records, verdict


def test_the_top_urls_on_windows_give_what_the_hand_built_job_gives() -> None:
    job = windowed_top_urls(input_topic="in")
    watermark = final_watermark(RECORDS)
    counts = run_stage(job, "minute_counts", source_values(), watermark, "heap")
    assert {e.timestamp_ms % 60_000 for e in counts} == {59_999}  # each count at its minute's last millisecond
    tops = run_stage(job, "top_urls", [(e.decoded(), e.timestamp_ms) for e in counts], watermark, "heap")
    verdict = verify_top_urls([e.decoded() for e in tops], expected_top_urls(RECORDS))
    assert verdict.exactly_once and verdict.records == verdict.expected_records > 3, verdict
