"""The exactly-once comparison: duplicates, gaps, wrong values and unexpected records, counted
and illustrated; and the example jobs' expectations built on it."""

from __future__ import annotations

import json

import pytest

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


def _top_urls_output(records: list[bytes]) -> list[dict]:
    """What a correct top_urls job writes, with the final top of each minute from the input."""
    output = []
    for minute, (n, top) in expected_top_urls(records).items():
        output += [{"minute": minute, "seq": i, "top": top if i == n else [["/any", 1]]} for i in range(1, n + 1)]
    return output


def test_top_urls_checks_every_sequence_number_and_only_the_final_top():
    records = list(generate(1500, seed=3))
    output = _top_urls_output(records)
    assert verify_top_urls(output, expected_top_urls(records)).exactly_once
    wrong_final = [dict(r, top=[]) if r["seq"] == 1000 else r for r in output]  # the first minute has 1000
    assert verify_top_urls(wrong_final, expected_top_urls(records)).wrong_values == 1
    replayed = output + output[10:20]
    verdict = verify_top_urls(replayed, expected_top_urls(records))
    assert verdict.duplicates == 10 and verdict.missing == 0


def test_example_identities_and_expectations():
    records = list(generate(50, seed=1, malformed_every=10))  # malformed records produce no output
    counts = url_counts_expectation(records)
    assert len(counts) == 45 and all(value == {"url": url, "hits": hits} for (url, hits), value in counts.items())
    assert len(top_urls_expectation(records)) == 45
    identify = EXAMPLES["url_counts"].identify
    assert identify("/a", {"url": "/a", "hits": 3}) == ("/a", 3)
    odd = identify("/a", "not a record")
    assert odd[0].startswith("<not an output record")
    assert compare([(odd, "not a record")], {}).unexpected == 1
