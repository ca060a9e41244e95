"""The schema catalog: every version of every message schema in ``schemas/``.

The package carries the catalog (``tidemark/schemas``, see :func:`packaged_schemas_dir`);
``$TIDEMARK_SCHEMAS_DIR`` overrides it.

Layout (see ``docs/concepts/wire-format.md``): ``schemas/<Name>/v<N>.avsc`` holds version ``N``
of the record ``tidemark.protocol.<Name>``. Each file is a self-contained Avro schema; nested
named types (``StateHandle``, ``TaskSnapshot``...) are defined inline at their first use inside
the file and referenced by full name afterwards ("inline-once"). A version file is immutable
once its id is recorded in ``schemas/ids.json``; an evolution is a new file next to the old one.

A :class:`SchemaCatalog` is loaded once and is read-only afterwards (thread-safe to share).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import avro.schema

from tidemark.protocol.errors import SchemaCatalogError

NAMESPACE = "tidemark.protocol"
SCHEMAS_DIR_ENV = "TIDEMARK_SCHEMAS_DIR"
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.avsc$")


def subject_for(full_name: str) -> str:
    """Schema Registry subject of a record: ``<namespace>.<Name>-value``."""
    return f"{full_name}-value"


def canonical_text(schema_json: Any) -> str:
    """The text that is fingerprinted and registered: sorted keys, no whitespace.

    Unlike Avro's Parsing Canonical Form it keeps docs, defaults and logical types, so that any
    change to a version file (even a doc) is detected and needs a new version.
    """
    return json.dumps(schema_json, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(schema_json: Any) -> str:
    """``sha256:<hex>`` of :func:`canonical_text`."""
    return "sha256:" + hashlib.sha256(canonical_text(schema_json).encode("utf-8")).hexdigest()


def strip_logical_types(schema_json: Any) -> Any:
    """A copy of ``schema_json`` without ``logicalType`` annotations.

    Logical types do not change the binary encoding; the codec reads and writes through this
    physical form so that ``timestamp-millis`` stays an ``int`` of milliseconds in Python (as the
    message dataclasses declare) instead of becoming a ``datetime``.
    """
    if isinstance(schema_json, dict):
        return {k: strip_logical_types(v) for k, v in schema_json.items() if k != "logicalType"}
    if isinstance(schema_json, list):
        return [strip_logical_types(v) for v in schema_json]
    return schema_json


@dataclass(frozen=True, eq=False)
class SchemaVersion:
    """One version of one record schema, parsed.

    ``version`` is ``None`` for a schema fetched from a registry that matches no local file.
    ``schema`` keeps logical types (it is what is registered); ``physical`` drops them and is what
    the codec's Avro readers and writers use.
    """

    full_name: str
    version: int | None
    schema_json: Any
    schema: avro.schema.RecordSchema
    physical: avro.schema.RecordSchema
    path: Path | None = None

    @property
    def name(self) -> str:
        return self.full_name.rsplit(".", 1)[-1]

    @property
    def subject(self) -> str:
        return subject_for(self.full_name)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.schema_json)

    @property
    def text(self) -> str:
        return canonical_text(self.schema_json)


def parse_version(schema_json: Any, version: int | None, path: Path | None = None) -> SchemaVersion:
    """Parse one schema document; raises :class:`SchemaCatalogError` if it is not a record."""
    try:
        schema = avro.schema.make_avsc_object(schema_json, avro.schema.Names())
        physical = avro.schema.make_avsc_object(strip_logical_types(schema_json), avro.schema.Names())
    except (avro.errors.AvroException, TypeError, ValueError, KeyError) as exc:
        raise SchemaCatalogError(f"invalid Avro schema {path or ''}: {exc}") from exc
    if not isinstance(schema, avro.schema.RecordSchema) or not isinstance(physical, avro.schema.RecordSchema):
        raise SchemaCatalogError(f"top-level schema must be a record: {path or schema_json!r}")
    return SchemaVersion(schema.fullname, version, schema_json, schema, physical, path)


class SchemaCatalog:
    """All versions of all top-level record schemas, by full name, oldest first."""

    def __init__(self, versions: dict[str, list[SchemaVersion]], root: Path | None = None) -> None:
        self._versions = {name: sorted(vs, key=lambda v: v.version or 0) for name, vs in versions.items()}
        self.root = root

    @classmethod
    def load(cls, root: Path) -> SchemaCatalog:
        """Read every ``<Name>/v<N>.avsc`` under ``root`` and check names and numbering."""
        if not root.is_dir():
            raise SchemaCatalogError(f"schemas folder not found: {root}")
        versions: dict[str, list[SchemaVersion]] = {}
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            loaded = [cls._load_file(folder, f) for f in sorted(folder.iterdir()) if _VERSION_FILE.match(f.name)]
            if not loaded:
                continue
            numbers = sorted(v.version or 0 for v in loaded)
            if numbers != list(range(1, len(numbers) + 1)):
                raise SchemaCatalogError(f"{folder}: versions must be v1..vN without gaps, got {numbers}")
            versions[loaded[0].full_name] = loaded
        return cls(versions, root)

    @staticmethod
    def _load_file(folder: Path, path: Path) -> SchemaVersion:
        match = _VERSION_FILE.match(path.name)
        assert match is not None
        try:
            schema_json = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SchemaCatalogError(f"cannot read {path}: {exc}") from exc
        parsed = parse_version(schema_json, int(match.group(1)), path)
        if parsed.full_name != f"{NAMESPACE}.{folder.name}":
            raise SchemaCatalogError(f"{path} defines {parsed.full_name}, expected {NAMESPACE}.{folder.name}")
        return parsed

    def names(self) -> list[str]:
        """Full names of every record with at least one version."""
        return sorted(self._versions)

    def versions(self, full_name: str) -> list[SchemaVersion]:
        """Every version of ``full_name``, oldest first."""
        try:
            return list(self._versions[full_name])
        except KeyError:
            raise SchemaCatalogError(f"no schema for {full_name}") from None

    def newest(self, full_name: str) -> SchemaVersion:
        """The newest version: the writer for encoding and the reader for decoding."""
        return self.versions(full_name)[-1]

    def all_versions(self) -> list[SchemaVersion]:
        """Every version of every record, by name then version."""
        return [v for name in self.names() for v in self._versions[name]]

    def find(self, full_name: str, schema_fingerprint: str) -> SchemaVersion | None:
        """The local version of ``full_name`` with this fingerprint, if any."""
        for candidate in self._versions.get(full_name, ()):
            if candidate.fingerprint == schema_fingerprint:
                return candidate
        return None


def default_schemas_dir() -> Path:
    """Where the catalog is: ``$TIDEMARK_SCHEMAS_DIR`` if set, else :func:`packaged_schemas_dir`."""
    configured = os.environ.get(SCHEMAS_DIR_ENV)
    return Path(configured) if configured else packaged_schemas_dir()


def packaged_schemas_dir() -> Path:
    """The catalog shipped inside the package, ``tidemark/schemas``, found with importlib.resources.

    In a source checkout (and an editable install) ``src/tidemark/schemas`` is a link to the
    top-level ``schemas/``, the one source of the files, so the path returned (resolved) is that
    folder and tools that append to ``ids.json`` write the committed file; a wheel carries a copy.
    """
    packaged = importlib.resources.files("tidemark") / "schemas"
    if not isinstance(packaged, Path):
        raise SchemaCatalogError(f"tidemark must be installed as files to read its schemas, not from {packaged}")
    return packaged.resolve()


@lru_cache(maxsize=8)
def load_catalog(root: Path | None = None) -> SchemaCatalog:
    """The catalog of ``root`` (default :func:`default_schemas_dir`), loaded once per process."""
    return SchemaCatalog.load(root if root is not None else default_schemas_dir())
