"""Schema evolution's rules (:mod:`tidemark.state.schema_evolution`) and the Avro schemas of
dataclasses (:mod:`tidemark.state.dataclass_avro`), without a backend."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from tidemark.state import AvroSerializer, DataclassSerializer, ListStateDescriptor, TaggedSerializer, ValueStateDescriptor
from tidemark.state.dataclass_avro import DataclassSchemaError, avro_schema_of
from tidemark.state.schema_evolution import Compatibility, apply_aliases, resolve_serializer, resolve_state
from tidemark.state.serializers import describe
from tidemark.state.snapshot import state_meta
from tidemark.state.ttl import StateTtlConfig

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": "float"},
    {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
]}


@dataclass
class Inner:
    tags: dict[str, int] = field(default_factory=dict)


@dataclass
class Outer:
    name: str
    score: float = 0.5
    flags: list[bool] = field(default_factory=list)
    inner: Inner | None = None
    raw: bytes = b""
    label: str | None = "x"
    old: int = field(default=0, metadata={"aliases": ["legacy"]})


def _resolve(writer: dict, reader: dict):
    return resolve_serializer(describe(AvroSerializer(writer)), describe(AvroSerializer(reader)))


def _migrated(writer: dict, reader: dict, datum: dict) -> dict:
    resolution = _resolve(writer, reader)
    assert resolution.compatibility is Compatibility.AFTER_MIGRATION, resolution
    return AvroSerializer(reader).deserialize(resolution.migrate(AvroSerializer(writer).serialize(datum)))


def test_the_same_schema_or_only_docs_defaults_and_aliases_changed_is_compatible_as_is() -> None:
    assert _resolve(ORDER, ORDER).compatibility is Compatibility.AS_IS
    documented = json.loads(json.dumps(ORDER))
    documented["doc"] = "an order"
    documented["fields"][0]["aliases"] = ["order_id"]
    assert _resolve(ORDER, documented).compatibility is Compatibility.AS_IS
    tagged = describe(TaggedSerializer())
    assert resolve_serializer(tagged, tagged).compatibility is Compatibility.AS_IS


def test_nested_records_evolve_promotions_renames_and_removals_included() -> None:
    reader = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "order_id", "type": "string", "aliases": ["id"]},  # renamed
        {"name": "amount", "type": "double"},  # float -> double
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
            {"name": "sku", "type": "string"}, {"name": "quantity", "type": "long", "aliases": ["qty"]},
            {"name": "gift", "type": "boolean", "default": False}]}}},
        {"name": "channel", "type": ["null", "string"], "default": None},
    ]}
    datum = {"id": "o-1", "amount": 2.5, "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]}
    assert _migrated(ORDER, reader, datum) == {
        "order_id": "o-1", "amount": 2.5, "channel": None,
        "lines": [{"sku": "a", "quantity": 2, "gift": False}, {"sku": "b", "quantity": 1, "gift": False}]}
    removed = {**ORDER, "fields": ORDER["fields"][:1]}
    assert _migrated(ORDER, removed, datum) == {"id": "o-1"}


def test_a_renamed_record_type_is_matched_through_its_aliases() -> None:
    writer = {"type": "record", "name": "Acc", "fields": [{"name": "n", "type": "int"}]}
    reader = {"type": "record", "name": "Accumulator", "aliases": ["Acc"], "fields": [{"name": "n", "type": "long"}]}
    assert apply_aliases(writer, reader)["name"] == "Accumulator"
    assert _migrated(writer, reader, {"n": 4}) == {"n": 4}


@pytest.mark.parametrize("reader, reason", [
    ({**ORDER, "fields": [{"name": "id", "type": "long"}]}, "reader type: long not compatible with writer type: string"),
    ({**ORDER, "fields": ORDER["fields"] + [{"name": "currency", "type": "string"}]}, "currency"),
    ({**ORDER, "name": "Purchase"}, "name"),
])
def test_incompatible_changes_say_why(reader: dict, reason: str) -> None:
    resolution = _resolve(ORDER, reader)
    assert resolution.compatibility is Compatibility.INCOMPATIBLE and reason in resolution.reason
    assert "\n" not in resolution.reason


def test_a_state_s_kind_ttl_and_serializer_family_must_stay() -> None:
    avro = AvroSerializer(ORDER)
    value = state_meta(ValueStateDescriptor("s", serializer=avro))
    cases = [
        (state_meta(ListStateDescriptor("s", serializer=avro)), "it was a VALUE state and is registered as LIST"),
        (state_meta(ValueStateDescriptor("s", serializer=avro, ttl=StateTtlConfig(60))), "TTL was turned on"),
        (state_meta(ValueStateDescriptor("s")), "its serializer changed from avro.binary.v1 to tidemark.tagged.v1"),
    ]
    for wanted, reason in cases:
        resolution = resolve_state(value, wanted)
        assert resolution.compatibility is Compatibility.INCOMPATIBLE and reason in resolution.reason


def test_a_dataclass_and_an_avro_serializer_with_the_same_schema_read_each_other() -> None:
    @dataclass
    class Line:
        sku: str
        qty: int

    plain = AvroSerializer(avro_schema_of(Line))
    typed = DataclassSerializer(Line)
    assert resolve_serializer(describe(plain), describe(typed)).compatibility is Compatibility.AS_IS
    assert typed.deserialize(plain.serialize({"sku": "a", "qty": 1})) == Line("a", 1)


def test_dataclass_schemas_follow_the_annotations_and_defaults() -> None:
    schema = avro_schema_of(Outer)
    fields = {f["name"]: f for f in schema["fields"]}
    assert schema["name"] == "Outer"
    assert fields["name"] == {"name": "name", "type": "string"}
    assert fields["score"] == {"name": "score", "type": "double", "default": 0.5}
    assert fields["flags"]["type"] == {"type": "array", "items": "boolean"} and fields["flags"]["default"] == []
    assert fields["inner"]["type"][0] == "null" and fields["inner"]["type"][1]["name"] == "Inner"
    assert fields["label"]["type"] == ["string", "null"]  # a union's default is of its first branch
    assert fields["old"]["aliases"] == ["legacy"]
    value = Outer("n", 1.0, [True], Inner({"a": 1}), b"\x00", None, 3)
    assert DataclassSerializer(Outer).deserialize(DataclassSerializer(Outer).serialize(value)) == value


def test_a_field_without_an_avro_type_is_named() -> None:
    @dataclass
    class Bad:
        when: set[int]

    with pytest.raises(DataclassSchemaError, match=r"Bad\.when"):
        DataclassSerializer(Bad)
