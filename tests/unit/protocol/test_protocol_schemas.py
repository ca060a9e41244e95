"""The schema files: coverage of every message, documentation, layout, ids and evolution."""

from __future__ import annotations

import dataclasses
import enum
import json
import shutil
import types
import typing
from pathlib import Path
from typing import Any

import avro.schema
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from tidemark.protocol import messages
from tidemark.protocol.errors import SchemaCatalogError
from tidemark.protocol.schema_ids import IDS_FILE, LocalSchemaIds, LocalSchemaIdTable
from tidemark.protocol.schemas import NAMESPACE, SchemaCatalog, load_catalog, parse_version

CATALOG = load_catalog()
NEWEST = [CATALOG.newest(name) for name in CATALOG.names()]
TIMESTAMP_FIELDS = {"triggered_at", "completed_at", "aborted_at", "requested_at", "issued_at", "registered_at",
                    "acked_at", "declined_at", "emitted_at", "discarded_at", "timestamp", "at",
                    "origin_timestamp", "failed_at"}


def _records(schema_json: Any) -> list[dict[str, Any]]:
    """Every record definition inside a schema document (inline-once: each defined once)."""
    found: list[dict[str, Any]] = []
    if isinstance(schema_json, dict):
        if schema_json.get("type") == "record":
            found.append(schema_json)
        for value in schema_json.values():
            found.extend(_records(value))
    elif isinstance(schema_json, list):
        for value in schema_json:
            found.extend(_records(value))
    return found


def _named(schema_json: Any) -> dict[str, Any]:
    """Named types (records and enums) defined in a document, by full name."""
    out: dict[str, Any] = {}
    if isinstance(schema_json, dict):
        if schema_json.get("type") in ("record", "enum"):
            out[f"{schema_json.get('namespace', NAMESPACE)}.{schema_json['name']}"] = schema_json
        for value in schema_json.values():
            out.update(_named(value))
    elif isinstance(schema_json, list):
        for value in schema_json:
            out.update(_named(value))
    return out


def test_one_schema_per_top_level_message() -> None:
    assert CATALOG.names() == sorted(f"{NAMESPACE}.{cls.__name__}" for cls in messages.MESSAGE_TYPES)


@pytest.mark.parametrize("version", CATALOG.all_versions(), ids=lambda v: f"{v.name}-v{v.version}")
def test_every_record_and_field_is_documented_and_namespaced(version: Any) -> None:
    for record in _records(version.schema_json):
        assert record.get("namespace") == NAMESPACE, record["name"]
        assert record.get("doc"), record["name"]
        for field in record["fields"]:
            assert field.get("doc"), f"{record['name']}.{field['name']}"


@pytest.mark.parametrize("version", NEWEST, ids=lambda v: v.name)
def test_timestamps_are_timestamp_millis_inside_the_type(version: Any) -> None:
    for record in _records(version.schema_json):
        for field in record["fields"]:
            if field["name"] in TIMESTAMP_FIELDS:
                branches = field["type"] if isinstance(field["type"], list) else [field["type"]]
                assert {"type": "long", "logicalType": "timestamp-millis"} in branches, field["name"]


def _check_field_type(hint: Any, schema: avro.schema.Schema, where: str) -> None:
    while hasattr(hint, "__supertype__"):
        hint = hint.__supertype__
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        assert isinstance(schema, avro.schema.EnumSchema), where
        assert list(schema.symbols) == [e.value for e in hint], where
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
        _check_record(hint, schema)
    elif origin in (typing.Union, types.UnionType):
        assert isinstance(schema, avro.schema.UnionSchema) and schema.schemas[0].type == "null", where
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        _check_field_type(inner, schema.schemas[1], where)
    elif origin is tuple:
        assert isinstance(schema, avro.schema.ArraySchema), where
        _check_field_type(typing.get_args(hint)[0], schema.items, where)
    elif origin is dict:
        assert isinstance(schema, avro.schema.MapSchema), where
        _check_field_type(typing.get_args(hint)[1], schema.values, where)
    else:
        expected = {bool: {"boolean"}, int: {"int", "long"}, str: {"string"}, bytes: {"bytes"}}[hint]
        assert schema.type in expected, where


def _check_record(cls: type, schema: avro.schema.Schema) -> None:
    assert isinstance(schema, avro.schema.RecordSchema) and schema.name == cls.__name__
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    assert [f.name for f in schema.fields] == [f.name for f in fields], cls.__name__
    for field, avro_field in zip(fields, schema.fields, strict=True):
        where = f"{cls.__name__}.{field.name}"
        _check_field_type(hints[field.name], avro_field.type, where)
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        assert avro_field.has_default == has_default, where
        if field.default is not dataclasses.MISSING:
            default = field.default.value if isinstance(field.default, enum.Enum) else field.default
            default = default.decode("latin-1") if isinstance(default, bytes) else default
            default = list(default) if isinstance(default, tuple) else default
            assert avro_field.default == default, where


@pytest.mark.parametrize("cls", messages.MESSAGE_TYPES, ids=lambda c: c.__name__)
def test_newest_schema_matches_the_dataclass(cls: type) -> None:
    _check_record(cls, CATALOG.newest(f"{NAMESPACE}.{cls.__name__}").schema)


def test_nested_types_have_one_definition_across_newest_schemas() -> None:
    definitions: dict[str, str] = {}
    for version in NEWEST:
        for name, body in _named(version.schema_json).items():
            text = json.dumps(body, sort_keys=True)
            assert definitions.setdefault(name, text) == text, f"{name} differs in {version.name}"
    assert {"tidemark.protocol.StateHandle", "tidemark.protocol.TaskSnapshot"} <= definitions.keys()


# --------------------------------------------------------------------------- evolution


@pytest.mark.parametrize("name", CATALOG.names())
def test_newest_reader_reads_every_older_writer_backward_transitive(name: str) -> None:
    versions = CATALOG.versions(name)
    checker = ReaderWriterCompatibilityChecker()
    for writer in versions:
        result = checker.get_compatibility(versions[-1].schema, writer.schema)
        assert result.compatibility is SchemaCompatibilityType.compatible, (writer.version, result.messages)
    for i, reader in enumerate(versions):  # and every intermediate reader reads everything before it
        for writer in versions[:i]:
            assert checker.get_compatibility(reader.schema, writer.schema).compatibility is \
                SchemaCompatibilityType.compatible


def test_task_ack_v2_adds_processed_bytes_with_a_default() -> None:
    v1, v2 = CATALOG.versions("tidemark.protocol.TaskAck")
    timings_v1 = _named(v1.schema_json)["tidemark.protocol.TaskTimings"]
    timings_v2 = _named(v2.schema_json)["tidemark.protocol.TaskTimings"]
    assert "processed_bytes" not in [f["name"] for f in timings_v1["fields"]]
    added = [f for f in timings_v2["fields"] if f["name"] == "processed_bytes"]
    assert added and added[0]["default"] == 0


def test_job_registration_v2_adds_changelog_fields_with_defaults() -> None:
    v1, v2, *_ = CATALOG.versions("tidemark.protocol.JobRegistration")
    assert [f["name"] for f in v2.schema_json["fields"]] == [
        *(f["name"] for f in v1.schema_json["fields"]), "changelog_operators", "changelog_partitions"]
    added = {f["name"]: f for f in v2.schema_json["fields"][-2:]}
    assert added["changelog_operators"]["default"] == [] and added["changelog_partitions"]["default"] == 0


def test_job_registration_v3_adds_the_attempt_outcome_with_defaults() -> None:
    _, v2, v3, *_ = CATALOG.versions("tidemark.protocol.JobRegistration")
    assert [f["name"] for f in v3.schema_json["fields"]] == [
        *(f["name"] for f in v2.schema_json["fields"]), "outcome", "reason"]
    assert all(f["default"] == "" for f in v3.schema_json["fields"][-2:])
    result = ReaderWriterCompatibilityChecker().get_compatibility(v3.schema, v2.schema)
    assert result.compatibility is SchemaCompatibilityType.compatible


def test_job_registration_v4_adds_the_worker_of_each_task_with_a_default() -> None:
    _, _, v3, v4 = CATALOG.versions("tidemark.protocol.JobRegistration")
    assert [f["name"] for f in v4.schema_json["fields"]] == [
        *(f["name"] for f in v3.schema_json["fields"]), "workers"]
    added = v4.schema_json["fields"][-1]
    assert added["type"] == {"type": "array", "items": "int"} and added["default"] == []
    checker = ReaderWriterCompatibilityChecker()
    assert checker.get_compatibility(v4.schema, v3.schema).compatibility is SchemaCompatibilityType.compatible
    # an older reader skips the field it does not know: a v3 coordinator reads v4 registrations
    assert checker.get_compatibility(v3.schema, v4.schema).compatibility is SchemaCompatibilityType.compatible


def test_a_required_field_without_default_is_detected_as_incompatible() -> None:
    newest = CATALOG.newest("tidemark.protocol.TaskDecline")
    doc = json.loads(json.dumps(newest.schema_json))
    doc["fields"].append({"name": "retry_after_ms", "type": "long", "doc": "new, required"})
    candidate = parse_version(doc, newest.version + 1)
    result = ReaderWriterCompatibilityChecker().get_compatibility(candidate.schema, newest.schema)
    assert result.compatibility is SchemaCompatibilityType.incompatible


# --------------------------------------------------------------------------- id table


def test_id_table_matches_every_schema_file() -> None:
    assert CATALOG.root is not None
    table = LocalSchemaIdTable.load(CATALOG.root / IDS_FILE)
    assert table.problems(CATALOG) == []
    assert sorted(e.id for e in table.entries) == list(range(1, len(table.entries) + 1))


@pytest.fixture()
def schemas_copy(tmp_path: Path) -> Path:
    assert CATALOG.root is not None
    shutil.copytree(CATALOG.root, tmp_path / "schemas")
    return tmp_path / "schemas"


def test_editing_a_version_file_without_a_new_version_is_refused(schemas_copy: Path) -> None:
    path = schemas_copy / "TaskDecline" / "v1.avsc"
    doc = json.loads(path.read_text())
    doc["fields"][3]["doc"] = "reworded"
    path.write_text(json.dumps(doc))
    catalog = SchemaCatalog.load(schemas_copy)
    table = LocalSchemaIdTable.load(schemas_copy / IDS_FILE)
    assert table.problems(catalog) == ["tidemark.protocol.TaskDecline-value v1 changed without a new version"]
    with pytest.raises(SchemaCatalogError, match="changed without a new version"):
        LocalSchemaIds(catalog, table)


def test_a_new_version_gets_a_fresh_id_and_becomes_the_writer(schemas_copy: Path) -> None:
    old = json.loads((schemas_copy / "TaskDecline" / "v1.avsc").read_text())
    old["fields"].append({"name": "retryable", "type": "boolean", "default": False, "doc": "may be retried"})
    (schemas_copy / "TaskDecline" / "v2.avsc").write_text(json.dumps(old))
    catalog = SchemaCatalog.load(schemas_copy)
    table = LocalSchemaIdTable.load(schemas_copy / IDS_FILE)
    assert table.problems(catalog) == ["tidemark.protocol.TaskDecline-value v2 has no id"]
    updated = table.with_new_versions(catalog)
    assert updated.problems(catalog) == []
    (entry,) = set(updated.entries) - set(table.entries)
    assert entry.id == table.next_id and entry.id not in {e.id for e in table.entries}
    assert updated.next_id == table.next_id + 1
    assert LocalSchemaIds(catalog, updated).writer_id("tidemark.protocol.TaskDecline") == entry.id
    assert LocalSchemaIdTable.load(_saved(schemas_copy, updated)).entries == updated.entries


def _saved(root: Path, table: LocalSchemaIdTable) -> Path:
    (root / IDS_FILE).write_text(table.to_json())
    return root / IDS_FILE


def test_removing_a_version_file_is_refused(schemas_copy: Path) -> None:
    (schemas_copy / "TaskAck" / "v2.avsc").unlink()
    catalog = SchemaCatalog.load(schemas_copy)
    problems = LocalSchemaIdTable.load(schemas_copy / IDS_FILE).problems(catalog)
    assert problems == ["tidemark.protocol.TaskAck-value v2 (id 14) has no schema file"]


def test_a_gap_in_version_numbers_is_refused(schemas_copy: Path) -> None:
    (schemas_copy / "TaskAck" / "v2.avsc").rename(schemas_copy / "TaskAck" / "v3.avsc")
    with pytest.raises(SchemaCatalogError, match="without gaps"):
        SchemaCatalog.load(schemas_copy)


def test_schemas_dir_comes_from_the_environment_first(monkeypatch: pytest.MonkeyPatch, schemas_copy: Path) -> None:
    from tidemark.protocol.schemas import SCHEMAS_DIR_ENV, default_schemas_dir

    monkeypatch.setenv(SCHEMAS_DIR_ENV, str(schemas_copy))
    assert default_schemas_dir() == schemas_copy
    monkeypatch.delenv(SCHEMAS_DIR_ENV)
    assert (default_schemas_dir() / IDS_FILE).is_file()


def test_the_packaged_catalog_of_a_checkout_is_the_top_level_schemas_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """src/tidemark/schemas links to schemas/, so the registry tool appends to the committed ids.json.

    The catalog is the imported package's own: the checkout's (these tests' schemas/) when Tidemark
    runs from it or an editable install of it, a wheel's copy when the tests run against a wheel."""
    import tidemark
    from tidemark.protocol.schemas import SCHEMAS_DIR_ENV, default_schemas_dir, packaged_schemas_dir

    monkeypatch.delenv(SCHEMAS_DIR_ENV, raising=False)
    checkout = Path(__file__).resolve().parents[3]
    assert (checkout / "src" / "tidemark" / "schemas").resolve() == checkout / "schemas"
    assert packaged_schemas_dir() == default_schemas_dir() == (Path(tidemark.__file__).parent / "schemas").resolve()
