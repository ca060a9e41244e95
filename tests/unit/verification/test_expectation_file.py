"""Expectation files for ``tidemark verify --expect``: parsing, errors that say where, and
how output records are identified."""

from __future__ import annotations

import json

import pytest

from tidemark.verification.comparison import ANY_VALUE, compare
from tidemark.verification.expectation_file import (
    ExpectationFileError,
    decode_record,
    load_expectation,
    output_identity,
    parse_expectation,
)

pytestmark = pytest.mark.unit


def _lines(*entries: object) -> list[str]:
    return [json.dumps(e) for e in entries]


def test_records_matched_by_key_alone():
    expected = parse_expectation(_lines({"key": "a", "value": {"n": 1}}, {"key": 7}, {"key": None, "value": 0}) + [""])
    assert expected == {"a": {"n": 1}, "7": ANY_VALUE, None: 0}


def test_records_matched_by_key_and_id_field():
    expected = parse_expectation(_lines({"key": "/cart", "value": {"hits": 1}}, {"key": "/cart", "value": {"hits": 2}},
                                        {"key": "/cart", "id": 3}), id_field="hits")
    assert expected == {("/cart", 1): {"hits": 1}, ("/cart", 2): {"hits": 2}, ("/cart", 3): ANY_VALUE}


@pytest.mark.parametrize(("lines", "id_field", "message"), [
    (["{oops"], None, "line 1: not JSON"),
    (_lines([1, 2]), None, 'line 1: expected an object with a "key"'),
    (_lines({"key": "a", "extra": 1}), None, "line 1: unknown field(s) extra"),
    (_lines({"key": 1.5}), None, '"key" must be a string, an integer or null'),
    (_lines({"key": "a"}, {"key": "a"}), None, "line 2: the record \"a\" is already listed on line 1; a key with "
                                               "several records needs --id-field"),
    (_lines({"key": "a", "id": 1}), None, 'an "id" needs --id-field'),
    (_lines({"key": "a", "value": {"n": 1}}), "seq", "no \"id\", and no value field 'seq'"),
])
def test_invalid_lines_are_reported_with_their_line_number(lines, id_field, message):
    with pytest.raises(ExpectationFileError) as error:
        parse_expectation(lines, id_field, source="exp.jsonl")
    assert message in str(error.value) and str(error.value).startswith("exp.jsonl line")


def test_load_reads_a_file_and_names_an_unreadable_one(tmp_path):
    path = tmp_path / "exp.jsonl"
    path.write_text('{"key": "a", "value": 1}\n\n{"key": "b", "value": 2}\n')
    assert load_expectation(path) == {"a": 1, "b": 2}
    with pytest.raises(ExpectationFileError, match="cannot read .*missing.jsonl: No such file"):
        load_expectation(tmp_path / "missing.jsonl")


def test_output_records_are_decoded_and_identified_like_the_file():
    assert decode_record(b"/cart", b'{"hits": 2}') == ("/cart", {"hits": 2})
    assert decode_record(None, b"not json") == (None, "not json")
    assert output_identity("/cart", {"hits": 2}, "hits") == ("/cart", 2)
    assert output_identity("/cart", "not json", "hits") != output_identity("/cart", {"hits": 2}, "hits")
    assert output_identity("/cart", {"hits": 2}, None) == "/cart"


def test_a_file_and_decoded_output_compare_end_to_end():
    expected = parse_expectation(_lines({"key": "/a", "value": {"hits": 1}}, {"key": "/a", "value": {"hits": 2}},
                                        {"key": "/b", "value": {"hits": 1}}), id_field="hits")
    raw = [(b"/a", b'{"hits": 1}'), (b"/a", b'{"hits": 1}'), (b"/a", b'{"hits": 2}')]
    actual = [(output_identity(*decode_record(k, v), "hits"), decode_record(k, v)[1]) for k, v in raw]
    verdict = compare(actual, expected)
    assert (verdict.duplicates, verdict.missing, verdict.wrong_values, verdict.unexpected) == (1, 1, 0, 0)
    assert verdict.examples["missing"] == ['["/b",1]']
