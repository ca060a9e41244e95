"""The stages' default JSON codec: orjson, with Python's json for what orjson refuses, so every
value that decoded or encoded before still does, and malformed input fails as before."""

import json
import math

import pytest

from tidemark.api import json_decode, json_encode


def test_values_round_trip_compact_with_sorted_keys():
    value = {"url": "/cart", "hits": 3, "nested": {"b": [1, 2.5, None, True], "a": "x"}}
    encoded = json_encode(value)
    assert encoded == b'{"hits":3,"nested":{"a":"x","b":[1,2.5,null,true]},"url":"/cart"}'
    assert json_decode(None, encoded) == value


def test_text_is_utf8_and_decodes_to_the_same_value_as_before():
    encoded = json_encode({"url": "/café/☕"})
    assert encoded == '{"url":"/café/☕"}'.encode()
    assert json_decode(None, encoded) == json.loads(json.dumps({"url": "/café/☕"}))


def test_what_orjson_refuses_is_taken_by_the_standard_library():
    assert json_decode(None, b'{"n": NaN, "big": 123456789012345678901234567890}')["big"] == 123456789012345678901234567890
    assert math.isnan(json_decode(None, b'{"n": NaN}')["n"])
    assert json_decode(None, '{"u": "é"}'.encode("utf-16")) == {"u": "é"}
    assert json_encode({"big": 2**70}) == b'{"big":1180591620717411303424}'
    assert json_encode({1: "a", 2: "b"}) == b'{"1":"a","2":"b"}'


def test_non_finite_numbers_are_written_as_null_which_json_has():
    assert json_encode({"x": float("nan"), "y": float("inf")}) == b'{"x":null,"y":null}'


def test_malformed_values_fail_with_the_standard_librarys_error():
    with pytest.raises(json.JSONDecodeError, match="Expecting value: line 1 column 1"):
        json_decode(None, b"not json")
    with pytest.raises(ValueError, match="record has no value"):
        json_decode(None, None)
    with pytest.raises(TypeError):
        json_encode({"s": {1, 2}})
