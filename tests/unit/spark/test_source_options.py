"""Parsing of the tidemark-kafka source's ``subscribe`` and ``assign`` options (no broker)."""

from __future__ import annotations

import json

import pytest

from tidemark.spark.options import InvalidOptionError, KafkaSourceOptions

BOOTSTRAP = {"kafka.bootstrap.servers": "h:1"}


def _parse(**options: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BOOTSTRAP, **options})


def test_assign_selects_exactly_the_named_partitions() -> None:
    parsed = _parse(assign=json.dumps({"orders": [3, 1, 1], "payments": [0]}))
    assert parsed.assigned == {("orders", 1), ("orders", 3), ("payments", 0)}
    assert parsed.topics == ("orders", "payments")


def test_subscribe_reads_every_partition_of_its_topics() -> None:
    parsed = _parse(subscribe="orders, payments")
    assert parsed.assigned is None and parsed.topics == ("orders", "payments")


def test_option_names_are_case_insensitive_like_spark_passes_them() -> None:
    assert KafkaSourceOptions.parse({**BOOTSTRAP, "ASSIGN": '{"t": [2]}'}).assigned == {("t", 2)}


@pytest.mark.parametrize(
    ("options", "named", "reason"),
    [
        ({"subscribe": "t", "assign": '{"t": [0]}'}, "assign", "cannot be combined with 'subscribe'"),
        ({}, "subscribe", "or 'assign'"),
        ({"subscribe": " ", "assign": "  "}, "subscribe", "or 'assign'"),
        ({"assign": "{not json"}, "assign", "expected JSON"),
        ({"assign": '["t", 0]'}, "assign", "expected JSON"),
        ({"assign": "{}"}, "assign", "expected JSON"),
        ({"assign": '{"t": []}'}, "assign", "topic 't': expected a non-empty list of partitions"),
        ({"assign": '{"t": 0}'}, "assign", "topic 't': expected a non-empty list of partitions"),
        ({"assign": '{"t": [0, -1]}'}, "assign", "topic 't': bad partition -1"),
        ({"assign": '{"t": ["0"]}'}, "assign", "topic 't': bad partition '0'"),
        ({"assign": '{"t": [true]}'}, "assign", "topic 't': bad partition True"),
        ({"assign": '{"t": [1.5]}'}, "assign", "topic 't': bad partition 1.5"),
        ({"assign": '{"": [0]}'}, "assign", "names an empty topic"),
    ],
)
def test_a_bad_subscribe_or_assign_names_the_option(options: dict[str, str], named: str, reason: str) -> None:
    with pytest.raises(InvalidOptionError) as info:
        _parse(**options)
    assert info.value.option == named
    assert str(info.value).startswith(f"tidemark-kafka option '{named}': ")
    assert reason in str(info.value)


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
def test_offsets_json_may_name_only_assigned_partitions(option: str) -> None:
    assign = json.dumps({"t": [1, 3]})
    with pytest.raises(InvalidOptionError, match=r"names partitions not in assign: \['t/0', 't/2'\]") as info:
        _parse(assign=assign, **{option: json.dumps({"t": {"0": 5, "1": 7, "2": 1}})})
    assert info.value.option == option
    with pytest.raises(InvalidOptionError, match=r"names topics not in assign: \['u'\]"):
        _parse(assign=assign, **{option: json.dumps({"u": {"1": 5}})})
    parsed = _parse(assign=assign, **{option: json.dumps({"t": {"3": 4}})})
    assert getattr(parsed, "starting" if option == "startingOffsets" else "ending").specific[("t", 3)] == 4
