"""Schema ids: the deterministic local id table and the Confluent Schema Registry client.

The codec asks a :class:`SchemaIdResolver` two questions: which id to write for a record
(the id of its newest schema version) and which writer schema an id read from the wire names.
Two implementations:

* :class:`LocalSchemaIds` (default): ids come from the committed table ``schemas/ids.json``,
  which maps (subject, version) to an id and records each version's fingerprint. Ids are never
  reused; a version file that changes without a new version fails to load.
* :class:`RegistrySchemaIds`: when a registry URL is configured, every version of every subject
  is registered (in order, under BACKWARD_TRANSITIVE) and the registry's ids are used; ids not
  seen yet are fetched from ``GET /schemas/ids/{id}``.

Run ``python -m tidemark.protocol.registry`` after adding a version file to append its id.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tidemark.protocol.errors import SchemaCatalogError, SchemaRegistryError, SchemaRegistryUnavailable
from tidemark.protocol.schemas import SchemaCatalog, SchemaVersion, load_catalog, parse_version, subject_for

IDS_FILE = "ids.json"
COMPATIBILITY = "BACKWARD_TRANSITIVE"
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaIdResolver(Protocol):
    """Maps records to schema ids and back. Built once, then used read-only (thread-safe)."""

    def writer_id(self, full_name: str) -> int:
        """Id of the newest schema version of ``full_name`` (written in every encoded record)."""
        ...

    def writer_schema(self, schema_id: int) -> SchemaVersion | None:
        """The schema an id names, or ``None`` when the id is unknown."""
        ...

    def is_known(self, schema_id: int) -> bool:
        """Whether the id is already known, without any I/O."""
        ...


# --------------------------------------------------------------------------- local table


@dataclass(frozen=True, slots=True)
class SchemaIdEntry:
    """One row of the local id table."""

    id: int
    subject: str
    version: int
    fingerprint: str


@dataclass(frozen=True, slots=True)
class LocalSchemaIdTable:
    """The committed ``schemas/ids.json``: append-only, ids never reused."""

    entries: tuple[SchemaIdEntry, ...]
    next_id: int

    @classmethod
    def load(cls, path: Path) -> LocalSchemaIdTable:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            entries = tuple(SchemaIdEntry(int(e["id"]), str(e["subject"]), int(e["version"]), str(e["fingerprint"]))
                            for e in raw["schemas"])
            return cls(entries, int(raw["next_id"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SchemaCatalogError(f"cannot read schema id table {path}: {exc}") from exc

    def to_json(self) -> str:
        rows = [{"id": e.id, "subject": e.subject, "version": e.version, "fingerprint": e.fingerprint}
                for e in sorted(self.entries, key=lambda e: e.id)]
        return json.dumps({"next_id": self.next_id, "schemas": rows}, indent=2) + "\n"

    def problems(self, catalog: SchemaCatalog) -> list[str]:
        """Every inconsistency between the table and the catalog (empty when they agree)."""
        found: list[str] = []
        ids = [e.id for e in self.entries]
        if len(set(ids)) != len(ids):
            found.append("an id is used twice")
        if ids and max(ids) >= self.next_id:
            found.append(f"next_id {self.next_id} is not above every id")
        if len({(e.subject, e.version) for e in self.entries}) != len(self.entries):
            found.append("a (subject, version) has two ids")
        files = {(v.subject, v.version): v for v in catalog.all_versions()}
        for entry in self.entries:
            version = files.get((entry.subject, entry.version))
            if version is None:
                found.append(f"{entry.subject} v{entry.version} (id {entry.id}) has no schema file")
            elif version.fingerprint != entry.fingerprint:
                found.append(f"{entry.subject} v{entry.version} changed without a new version")
        recorded = {(e.subject, e.version) for e in self.entries}
        found.extend(f"{s} v{v} has no id" for (s, v) in sorted(files, key=str) if (s, v) not in recorded)
        return found

    def with_new_versions(self, catalog: SchemaCatalog) -> LocalSchemaIdTable:
        """This table plus a fresh id for every version file that has none (deterministic order)."""
        recorded = {(e.subject, e.version) for e in self.entries}
        entries, next_id = list(self.entries), self.next_id
        for version in catalog.all_versions():
            if (version.subject, version.version) not in recorded:
                entries.append(SchemaIdEntry(next_id, version.subject, version.version or 0, version.fingerprint))
                next_id += 1
        return LocalSchemaIdTable(tuple(entries), next_id)


class LocalSchemaIds:
    """Resolver over the committed id table; refuses to start if the table and files disagree."""

    def __init__(self, catalog: SchemaCatalog, table: LocalSchemaIdTable) -> None:
        problems = table.problems(catalog)
        if problems:
            raise SchemaCatalogError("schema id table out of date: " + "; ".join(problems))
        by_key = {(v.subject, v.version): v for v in catalog.all_versions()}
        self._by_id = {e.id: by_key[(e.subject, e.version)] for e in table.entries}
        self._writer_ids = {name: self._id_of(table, catalog.newest(name)) for name in catalog.names()}

    @classmethod
    def from_dir(cls, root: Path | None = None) -> LocalSchemaIds:
        catalog = load_catalog(root)
        assert catalog.root is not None
        return cls(catalog, LocalSchemaIdTable.load(catalog.root / IDS_FILE))

    @staticmethod
    def _id_of(table: LocalSchemaIdTable, version: SchemaVersion) -> int:
        return next(e.id for e in table.entries if (e.subject, e.version) == (version.subject, version.version))

    def writer_id(self, full_name: str) -> int:
        try:
            return self._writer_ids[full_name]
        except KeyError:
            raise SchemaCatalogError(f"no schema id for {full_name}") from None

    def writer_schema(self, schema_id: int) -> SchemaVersion | None:
        return self._by_id.get(schema_id)

    def is_known(self, schema_id: int) -> bool:
        return schema_id in self._by_id


# --------------------------------------------------------------------------- registry


class SchemaRegistryClient:
    """Minimal client for the Confluent Schema Registry REST API (Avro subjects only).

    Stateless apart from its options; every call is one HTTP request with ``timeout_s``.
    Credentials in the URL (``https://key:secret@host``) are sent as HTTP basic auth.
    """

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        parts = urllib.parse.urlsplit(url)
        self._headers = {"Content-Type": _CONTENT_TYPE, "Accept": _CONTENT_TYPE}
        if parts.username is not None:
            secret = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(secret.encode()).decode("ascii")
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        self.url = urllib.parse.urlunsplit(parts).rstrip("/")
        self.timeout_s = timeout_s

    def register(self, subject: str, schema_text: str) -> int:
        """``POST /subjects/{subject}/versions``: the id (existing one if already registered)."""
        body = self._request("POST", f"/subjects/{_quote(subject)}/versions", {"schema": schema_text})
        return int(body["id"])

    def schema_by_id(self, schema_id: int) -> str | None:
        """``GET /schemas/ids/{id}``: the schema text, or ``None`` if the registry does not know it."""
        try:
            body = self._request("GET", f"/schemas/ids/{int(schema_id)}")
        except SchemaRegistryError as exc:
            if exc.status == 404 and not isinstance(exc, SchemaRegistryUnavailable):
                return None
            raise
        return str(body["schema"])

    def set_compatibility(self, subject: str, level: str) -> None:
        """``PUT /config/{subject}``."""
        self._request("PUT", f"/config/{_quote(subject)}", {"compatibility": level})

    def is_compatible(self, subject: str, schema_text: str) -> bool:
        """``POST /compatibility/subjects/{subject}/versions/latest``."""
        path = f"/compatibility/subjects/{_quote(subject)}/versions/latest"
        return bool(self._request("POST", path, {"schema": schema_text})["is_compatible"])

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return _json_body(response.read(), method, path)
        except urllib.error.HTTPError as exc:
            raise _registry_error(exc, method, path) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            raise SchemaRegistryUnavailable(f"schema registry {self.url} unreachable ({method} {path}): {exc}") from exc


def _quote(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _json_body(raw: bytes, method: str, path: str) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise SchemaRegistryError(f"{method} {path}: response is not JSON") from exc
    if not isinstance(body, dict):
        raise SchemaRegistryError(f"{method} {path}: unexpected response {body!r}")
    return body


def _registry_error(exc: urllib.error.HTTPError, method: str, path: str) -> SchemaRegistryError:
    try:
        body = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        body = {}
    code = body.get("error_code") if isinstance(body, dict) else None
    message = body.get("message", exc.reason) if isinstance(body, dict) else exc.reason
    kind = SchemaRegistryUnavailable if exc.code >= 500 else SchemaRegistryError
    return kind(f"{method} {path}: HTTP {exc.code} {message}", status=exc.code, error_code=code)


class RegistrySchemaIds:
    """Resolver backed by a Schema Registry.

    Lifecycle: construction registers every local version of every subject, oldest first, after
    setting the subject's compatibility to BACKWARD_TRANSITIVE (so the registry re-checks our
    evolution); it raises :class:`SchemaRegistryError` if the registry refuses. Afterwards ids
    are served from memory; an unseen id is fetched once; unknown ids are remembered (bounded).
    """

    _MAX_UNKNOWN = 1024

    def __init__(self, client: SchemaRegistryClient, catalog: SchemaCatalog) -> None:
        self.client = client
        self._catalog = catalog
        self._lock = threading.Lock()
        self._by_id: dict[int, SchemaVersion] = {}
        self._unknown: OrderedDict[int, None] = OrderedDict()
        self._writer_ids: dict[str, int] = {}
        for name in catalog.names():
            subject = subject_for(name)
            client.set_compatibility(subject, COMPATIBILITY)
            for version in catalog.versions(name):
                schema_id = client.register(subject, version.text)
                self._by_id.setdefault(schema_id, version)
                self._writer_ids[name] = schema_id

    def writer_id(self, full_name: str) -> int:
        try:
            return self._writer_ids[full_name]
        except KeyError:
            raise SchemaCatalogError(f"no schema id for {full_name}") from None

    def is_known(self, schema_id: int) -> bool:
        with self._lock:
            return schema_id in self._by_id

    def writer_schema(self, schema_id: int) -> SchemaVersion | None:
        with self._lock:
            if schema_id in self._by_id:
                return self._by_id[schema_id]
            if schema_id in self._unknown:
                return None
        version = self._fetch(schema_id)
        with self._lock:
            if version is None:
                self._unknown[schema_id] = None
                while len(self._unknown) > self._MAX_UNKNOWN:
                    self._unknown.popitem(last=False)
            else:
                self._by_id[schema_id] = version
        return version

    def _fetch(self, schema_id: int) -> SchemaVersion | None:
        text = self.client.schema_by_id(schema_id)
        if text is None:
            return None
        try:
            fetched = parse_version(json.loads(text), None)
        except (ValueError, SchemaCatalogError):
            return None
        if fetched.full_name not in self._catalog.names():
            return None
        return self._catalog.find(fetched.full_name, fetched.fingerprint) or fetched


def main(argv: list[str] | None = None) -> int:
    """Append ids for new version files to ``schemas/ids.json``; report stale rows."""
    catalog = load_catalog()
    assert catalog.root is not None
    path = catalog.root / IDS_FILE
    table = LocalSchemaIdTable.load(path) if path.exists() else LocalSchemaIdTable((), 1)
    updated = table.with_new_versions(catalog)
    problems = updated.problems(catalog)
    if problems:
        print("\n".join(problems))
        return 1
    added = len(updated.entries) - len(table.entries)
    if added:
        path.write_text(updated.to_json(), encoding="utf-8")
    print(f"{path}: {added} id(s) added, {len(updated.entries)} in total")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
