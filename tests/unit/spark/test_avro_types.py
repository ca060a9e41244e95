"""The Spark type of an Avro schema (a state's typed value column), and the schemas without one."""

from __future__ import annotations

import pytest

from tidemark.spark.avro_types import spark_type

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("schema", "expected"), [
    ("long", "bigint"),
    (["null", "string"], "string"),
    ({"type": "array", "items": "double"}, "array<double>"),
    ({"type": "map", "values": "int"}, "map<string,int>"),
    ({"type": "enum", "name": "Color", "symbols": ["RED"]}, "string"),
    ({"type": "long", "logicalType": "timestamp-millis"}, "timestamp"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}, "decimal(9,2)"),
    ({"type": "record", "name": "a.Visit", "fields": [
        {"name": "url", "type": "string"},
        {"name": "at", "type": {"type": "record", "name": "At", "fields": [{"name": "ms", "type": "long"}]}},
        {"name": "again", "type": ["null", "At"]}]},
     "struct<url:string,at:struct<ms:bigint>,again:struct<ms:bigint>>"),
])
def test_avro_schemas_map_to_spark_types(schema, expected) -> None:
    assert spark_type(schema).simpleString() == expected


@pytest.mark.parametrize("schema", [
    ["null", "string", "long"],
    {"type": "int", "logicalType": "time-millis"},
    {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"]}]},
])
def test_schemas_without_a_spark_type_fall_back(schema) -> None:
    assert spark_type(schema) is None
