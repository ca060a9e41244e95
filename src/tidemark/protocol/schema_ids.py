"""Schema ids: the deterministic local id table, or the ids of a Confluent Schema Registry.

The codec asks a :class:`SchemaIdResolver` two questions: which id to write for a record
(the id of its newest schema version) and which writer schema an id read from the wire names.
Two implementations:

* :class:`LocalSchemaIds` (default): ids come from the committed table ``schemas/ids.json``,
  which maps (subject, version) to an id and records each version's fingerprint. Ids are never
  reused; a version file that changes without a new version fails to load.
* :class:`RegistrySchemaIds`: when a registry URL is configured, every version of every subject
  is registered (in order, under BACKWARD_TRANSITIVE) through confluent-kafka's
  ``SchemaRegistryClient`` (:func:`registry_client`) and the registry's ids are used; ids not
  seen yet are fetched by id. Registry failures surface as :class:`SchemaRegistryError`, or
  :class:`SchemaRegistryUnavailable` when the registry cannot be reached or answers 5xx. The
  client (with its HTTP and OAuth stacks) is imported only when a registry is used.

Run ``python -m tidemark.protocol.schema_ids`` after adding a version file to append its id.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from tidemark.protocol.errors import SchemaCatalogError, SchemaRegistryError, SchemaRegistryUnavailable
from tidemark.protocol.schemas import SchemaCatalog, SchemaVersion, load_catalog, parse_version, subject_for

IDS_FILE = "ids.json"
COMPATIBILITY = "BACKWARD_TRANSITIVE"

if TYPE_CHECKING:
    from confluent_kafka.schema_registry import SchemaRegistryClient

T = TypeVar("T")


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
        catalog = load_catalog() if root is None else load_catalog(root)  # one cache entry for the default
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


def registry_client(url: str, timeout_s: float = 5.0) -> SchemaRegistryClient:
    """confluent-kafka's client for ``url``; credentials in the URL (``https://key:secret@host``)
    are sent as HTTP basic auth. Every call is one HTTP request of at most ``timeout_s``: no
    retries, so a codec that cannot reach its registry fails at once and clearly."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url, "timeout": timeout_s, "max.retries": 0})


def without_credentials(url: str) -> str:
    """``url`` without the ``user:password@`` part, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def registry_call(what: str, call: Callable[[], T]) -> T:
    """``call()``, with the client's failures as :class:`SchemaRegistryError` (the registry
    refused) or :class:`SchemaRegistryUnavailable` (unreachable, timed out, or HTTP 5xx)."""
    import httpx2
    from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentRegistryError

    try:
        return call()
    except ConfluentRegistryError as exc:
        status, code = exc.http_status_code, exc.error_code
        kind = SchemaRegistryUnavailable if status >= 500 else SchemaRegistryError
        raise kind(f"{what}: HTTP {status} {exc.error_message}", status=status,
                   error_code=None if code == ConfluentRegistryError.UNKNOWN else code) from exc
    except httpx2.TransportError as exc:
        raise SchemaRegistryUnavailable(f"schema registry unreachable ({what}): {exc!r}") from exc


class RegistrySchemaIds:
    """Resolver backed by a Schema Registry.

    Lifecycle: construction registers every local version of every subject, oldest first, after
    setting the subject's compatibility to BACKWARD_TRANSITIVE (so the registry re-checks our
    evolution); it raises :class:`SchemaRegistryError` if the registry refuses. Afterwards ids
    are served from memory; an unseen id is fetched once; unknown ids are remembered (bounded).
    """

    _MAX_UNKNOWN = 1024

    def __init__(self, client: SchemaRegistryClient, catalog: SchemaCatalog, where: str = "schema registry") -> None:
        from confluent_kafka.schema_registry import Schema

        self.client = client
        self._where = where
        self._catalog = catalog
        self._lock = threading.Lock()
        self._by_id: dict[int, SchemaVersion] = {}
        self._unknown: OrderedDict[int, None] = OrderedDict()
        self._writer_ids: dict[str, int] = {}
        for name in catalog.names():
            subject = subject_for(name)
            registry_call(f"{where} PUT config {subject}", lambda s=subject: client.set_compatibility(s, COMPATIBILITY))
            for version in catalog.versions(name):
                schema = Schema(version.text, "AVRO")
                schema_id = registry_call(f"{where} register {subject} v{version.version}",
                                          lambda s=subject, v=schema: client.register_schema(s, v))
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
        try:
            schema = registry_call(f"{self._where} GET schema {schema_id}", lambda: self.client.get_schema(schema_id))
        except SchemaRegistryError as exc:
            if exc.status == 404:  # the registry does not know the id
                return None
            raise
        try:
            fetched = parse_version(json.loads(schema.schema_str or ""), None)
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
