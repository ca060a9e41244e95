"""The exactly-once comparison: duplicates, gaps, wrong values and unexpected records, counted
and illustrated; and the example jobs' expectations built on it."""

from __future__ import annotations

import json

import pytest

from tidemark.examples.access_log import closed_minutes
from tidemark.examples.generator import expected_top_urls, generate
from tidemark.examples.verify import EXAMPLES, top_urls_expectation, url_counts_expectation, verify_top_urls
from tidemark.verification.comparison import ANY_VALUE, EXAMPLES_PER_KIND, compare

pytestmark = pytest.mark.unit


def test_exact_output_passes():
    verdict = compare([("a", 1), ("b", 2)], {"a": 1, "b": 2})
    assert verdict.exactly_once
    assert (verdict.records, verdict.expected_records) == (2, 2)
    assert verdict.examples == {} and verdict.details == []


def test_each_kind_of_problem_is_counted_with_an_example():
    actual = [("a", 1), ("b", 2), ("b", 2), ("b", 2), ("c", 9), ("z", 0)]
    verdict = compare(actual, {"a": 1, "b": 2, "c": 3, "d": 4})
    assert not verdict.exactly_once
    assert (verdict.duplicates, verdict.missing, verdict.wrong_values, verdict.unexpected) == (2, 1, 1, 1)
    assert verdict.examples == {"duplicates": ['"b" x3'], "missing": ['"d"'],
                                "wrong values": ['"c": got 9, want 3'], "unexpected": ['"z": 0']}
    assert verdict.details[0] == '2 duplicates, e.g. "b" x3'


def test_any_value_checks_presence_only_and_a_duplicate_is_judged_by_its_first_copy():
    assert compare([("a", "whatever")], {"a": ANY_VALUE}).exactly_once
    verdict = compare([("a", 1), ("a", 2)], {"a": 1})
    assert (verdict.duplicates, verdict.wrong_values) == (1, 0)


def test_examples_are_capped_per_kind():
    verdict = compare([], {i: i for i in range(10)})
    assert verdict.missing == 10 and len(verdict.examples["missing"]) == EXAMPLES_PER_KIND


def test_as_dict_is_json():
    document = json.loads(json.dumps(compare([("a", 1), ("a", 1)], {"a": 1}).as_dict()))
    assert document["exactly_once"] is False and document["duplicates"] == 1


def test_top_urls_expects_each_closed_minute_once_with_its_final_top():
    records = list(generate(2500, seed=3))  # 1000 records a minute: minutes 0 and 1 close, 2 stays open
    expected = expected_top_urls(records)
    assert len(expected) == 2
    output = [{"minute": minute, "top": top} for minute, top in expected.items()]
    assert verify_top_urls(output, expected).exactly_once
    assert verify_top_urls([dict(output[0], top=[]), output[1]], expected).wrong_values == 1
    verdict = verify_top_urls(output + output[:1], expected)
    assert verdict.duplicates == 1 and verdict.missing == 0
    assert verify_top_urls(output[1:], expected).missing == 1


def test_a_minute_closes_once_the_largest_event_time_passes_its_end_by_the_bound():
    minute = 60_000
    assert closed_minutes(2 * minute + 999, max_out_of_orderness_ms=1_000) == minute  # minute 1 still open
    assert closed_minutes(2 * minute + 1_000, max_out_of_orderness_ms=1_000) == 2 * minute


def test_example_identities_and_expectations():
    records = list(generate(50, seed=1, malformed_every=10))  # malformed records produce no output
    counts = url_counts_expectation(records)
    assert len(counts) == 45 and all(value == {"url": url, "hits": hits} for (url, hits), value in counts.items())
    assert top_urls_expectation(records) == {}  # 45 records: under a minute of event time, none closed
    identify = EXAMPLES["url_counts"].identify
    assert identify("/a", {"url": "/a", "hits": 3}) == ("/a", 3)
    odd = identify("/a", "not a record")
    assert odd[0].startswith("<not an output record")
    assert compare([(odd, "not a record")], {}).unexpected == 1
