"""Schema evolution: whether a restored state's stored bytes can be read by the serializer a job
registers now, and the migration that rewrites them (Flink's ``TypeSerializerSchemaCompatibility``).

A snapshot records each state's serializer (:func:`tidemark.state.serializers.describe`: an id and
its configuration, an Avro schema included). When a job registers a state that was restored,
:func:`resolve_state` compares the two definitions and answers one of

* **compatible as is**: the same serializer, or Avro schemas with the same parsing canonical form
  (a changed default, doc or alias only): the bytes are read unchanged;
* **compatible after migration**: Avro schemas (an :class:`~tidemark.state.serializers.AvroSerializer`'s
  or a :class:`~tidemark.state.serializers.DataclassSerializer`'s) that Avro's schema resolution
  reconciles: a field added with a default, a field removed, a field renamed with the new name's
  ``aliases`` naming the old one, a numeric promotion (int -> long -> float -> double, string <->
  bytes), a union widened. Each stored value is read with the writer's schema resolved to the
  reader's, and written again with the reader's (:attr:`Resolution.migrate`); the backend rewrites
  its state once (:meth:`tidemark.state.local_backend.LocalKeyedStateBackend._migrate_stored`);
* **incompatible**: anything else (another serializer, a type changed without promotion, a field
  added without a default, another state kind, map keys whose serializer changed, TTL turned on or
  off); the registration fails with :class:`StateMigrationError`, one line naming the state and why.

A migrated state's definition carries ``schema_version`` (the restored one's plus one), so that a
restore meeting both definitions (the changelog of an attempt before the migration and one after
it, or old tasks materialized on either side of it) moves the older bytes forward, never back.
Stored bytes are migrated without the job's code: the schemas in the two definitions are enough,
which is how the materializer's replica follows a migration logged in a changelog.
"""

from __future__ import annotations

import enum
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidemark.state.backend import StateRegistrationError
from tidemark.state.serializers import SCHEMA_SERIALIZER_IDS, frame_elements, unframe_elements

Migration = Callable[[bytes], bytes]
_TTL_PREFIX = 8  # a TTL value's timestamp before its value (tidemark.state.ttl.TtlSerializer)


class StateMigrationError(StateRegistrationError):
    """A restored state cannot be read by the serializer registered now (a restart will not fix it)."""


class Compatibility(str, enum.Enum):
    AS_IS = "compatible as is"
    AFTER_MIGRATION = "compatible after migration"
    INCOMPATIBLE = "incompatible"


@dataclass(frozen=True)
class Resolution:
    compatibility: Compatibility
    reason: str = ""
    migrate: Migration | None = None  # stored value bytes -> bytes (AFTER_MIGRATION only)


AS_IS = Resolution(Compatibility.AS_IS)


def schema_version(meta: dict[str, Any]) -> int:
    """How many migrations the state's stored bytes went through (0 before any)."""
    return int(meta.get("schema_version", 0))


def resolve_serializer(restored: dict[str, Any], wanted: dict[str, Any]) -> Resolution:
    """The compatibility of bytes written by ``restored`` (a serializer's description) with
    ``wanted`` (see the module docstring); ``migrate`` rewrites one serialized value."""
    if restored == wanted:
        return AS_IS
    if restored["id"] in SCHEMA_SERIALIZER_IDS and wanted["id"] in SCHEMA_SERIALIZER_IDS:
        return _resolve_avro(restored["config"]["schema"], wanted["config"]["schema"])
    if restored["id"] != wanted["id"]:
        return Resolution(Compatibility.INCOMPATIBLE,
                          f"its serializer changed from {restored['id']} to {wanted['id']}")
    return Resolution(Compatibility.INCOMPATIBLE, f"its serializer's configuration changed ({restored['config']} "
                                                  f"-> {wanted['config']})")


def resolve_state(restored: dict[str, Any], wanted: dict[str, Any]) -> Resolution:
    """The compatibility of a restored state (its snapshot meta) with the one registered now;
    ``migrate`` rewrites one stored value (a TTL timestamp kept, a list element by element)."""
    if restored["kind"] != wanted["kind"]:
        return Resolution(Compatibility.INCOMPATIBLE,
                          f"it was a {restored['kind']} state and is registered as {wanted['kind']}")
    if (restored["ttl_ms"] is None) != (wanted["ttl_ms"] is None):
        return Resolution(Compatibility.INCOMPATIBLE, "TTL was turned " + ("on" if restored["ttl_ms"] is None else "off")
                          + " (the stored values' layout differs)")
    values = resolve_entries(restored, wanted)
    if values.migrate is None:
        return values
    return Resolution(values.compatibility, values.reason,
                      stored_value_migration(values.migrate, restored["kind"] == "LIST", restored["ttl_ms"] is not None))


def resolve_entries(restored: dict[str, Any], wanted: dict[str, Any]) -> Resolution:
    """The compatibility of a state's keys (``user_key_serializer``: they must read as they are,
    their bytes are its order) and values (``value_serializer``: they may migrate), keyed or
    operator state; ``migrate`` rewrites one serialized value."""
    keys = resolve_serializer(restored["user_key_serializer"], wanted["user_key_serializer"])
    if keys.compatibility is not Compatibility.AS_IS:
        return Resolution(Compatibility.INCOMPATIBLE, "its keys' serializer changed "
                          f"({keys.reason or 'their bytes would change'}; keys cannot be migrated)")
    return resolve_serializer(restored["value_serializer"], wanted["value_serializer"])


def stored_value_migration(migrate: Migration, is_list: bool, has_ttl: bool) -> Migration:
    """``migrate`` applied to what a backend stores for one slot: a list's framed elements each,
    after a TTL value's timestamp."""
    one = (lambda data: data[:_TTL_PREFIX] + migrate(data[_TTL_PREFIX:])) if has_ttl else migrate
    if is_list:
        return lambda data: frame_elements([one(element) for element in unframe_elements(data)])
    return one


def element_migration(stored: Migration) -> Migration:
    """The migration of one list element (a list state's ``ADD``) from that of a stored list."""
    return lambda element: unframe_elements(stored(frame_elements([element])))[0]


def with_schema_version(meta: dict[str, Any], version: int) -> dict[str, Any]:
    """``meta`` carrying ``version`` (left out while 0, as in snapshots before any migration)."""
    return {**meta, "schema_version": version} if version else meta


def check_registration(name: str, resolution: Resolution) -> None:
    """Raise :class:`StateMigrationError` (one line) for an incompatible ``resolution``."""
    if resolution.compatibility is Compatibility.INCOMPATIBLE:
        raise StateMigrationError(f"state {name!r} cannot be restored: {resolution.reason}")


# ---------------------------------------------------------------- Avro


def _resolve_avro(writer_json: str, reader_json: str) -> Resolution:
    import avro.errors
    import avro.io
    import avro.schema
    from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

    writer, reader = avro.schema.parse(writer_json), avro.schema.parse(reader_json)
    if writer.canonical_form == reader.canonical_form:
        return AS_IS
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is not SchemaCompatibilityType.compatible:
        where = ", ".join(sorted(result.locations - {"/"}) or sorted(result.locations))
        return Resolution(Compatibility.INCOMPATIBLE, "its Avro schema cannot read the stored values: "
                          + "; ".join(sorted(result.messages)) + (f" (at {where})" if where else ""))
    aliased = avro.schema.parse(json.dumps(apply_aliases(json.loads(writer_json), json.loads(reader_json))))
    datum_reader, datum_writer = avro.io.DatumReader(aliased, reader), avro.io.DatumWriter(reader)
    decoder_type, encoder_type = avro.io.BinaryDecoder, avro.io.BinaryEncoder

    def migrate(data: bytes) -> bytes:
        datum = datum_reader.read(decoder_type(io.BytesIO(data)))
        out = io.BytesIO()
        datum_writer.write(datum, encoder_type(out))
        return out.getvalue()

    return Resolution(Compatibility.AFTER_MIGRATION, "", migrate)


_NAMED = ("record", "error", "enum", "fixed")


def _fullname(schema: dict[str, Any], namespace: str | None) -> tuple[str, str | None]:
    name = schema["name"]
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    space = schema.get("namespace", namespace)
    return (f"{space}.{name}" if space else name), space


def _reader_names(schema: Any, namespace: str | None, out: dict[str, tuple[str, dict[str, Any]]]) -> None:
    """Every named type of the reader's schema by its full name and by each of its aliases."""
    if isinstance(schema, list):
        for branch in schema:
            _reader_names(branch, namespace, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in _NAMED:
            full, space = _fullname(schema, namespace)
            out[full] = (full, schema)
            for alias in schema.get("aliases", []):
                out[alias if "." in alias else (f"{space}.{alias}" if space else alias)] = (full, schema)
            for field in schema.get("fields", []):
                _reader_names(field["type"], space, out)
        elif kind == "array":
            _reader_names(schema["items"], namespace, out)
        elif kind == "map":
            _reader_names(schema["values"], namespace, out)
        elif isinstance(kind, (dict, list)):
            _reader_names(kind, namespace, out)


def apply_aliases(writer: Any, reader: Any) -> Any:
    """The writer's schema with the reader's aliases applied (Avro's ``Schema.applyAliases``):
    a named type or a record field the reader renamed, listing the old name among its
    ``aliases``, gets the reader's name, so that resolution by name matches them."""
    names: dict[str, tuple[str, dict[str, Any]]] = {}
    _reader_names(reader, None, names)
    return _renamed(writer, None, names)


def _renamed(schema: Any, namespace: str | None, names: dict[str, tuple[str, dict[str, Any]]]) -> Any:
    if isinstance(schema, list):
        return [_renamed(branch, namespace, names) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in _NAMED:
        full, space = _fullname(schema, namespace)
        target_full, target = names.get(full, (full, None))
        out = dict(schema)
        if target is not None:
            out.pop("namespace", None)
            out["name"] = target_full
        if "fields" in schema:
            renames = {} if target is None else {alias: field["name"] for field in target.get("fields", [])
                                                 for alias in field.get("aliases", [])}
            reader_fields = set() if target is None else {field["name"] for field in target.get("fields", [])}
            out["fields"] = [{**field, "name": field["name"] if field["name"] in reader_fields
                              else renames.get(field["name"], field["name"]),
                              "type": _renamed(field["type"], space, names)} for field in schema["fields"]]
        return out
    if kind == "array":
        return {**schema, "items": _renamed(schema["items"], namespace, names)}
    if kind == "map":
        return {**schema, "values": _renamed(schema["values"], namespace, names)}
    if isinstance(kind, (dict, list)):
        return {**schema, "type": _renamed(kind, namespace, names)}
    return schema
