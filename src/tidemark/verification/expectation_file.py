"""Expectation files: what a user's job must have committed, one JSON document per line.

Each non-blank line names one output record::

    {"key": "/cart", "value": {"url": "/cart", "hits": 3}}
    {"key": "1767225600000", "id": 7}

* ``key``: the output record's Kafka key as text (what the job's ``emit`` key encodes to: its
  ``str()``; an integer is accepted and turned into text), or ``null`` for records without a key.
* ``value`` (optional): the record's value as JSON; absent, only the record's presence is checked.
* ``id`` (optional, only with ``--id-field F``): tells apart the records of one key; it defaults
  to the value's field ``F``.

Output records are matched by *identity*: the key alone (one record per key), or ``(key, id)``
with ``--id-field F``, where an output record's id is its value's field ``F``. Listing one
identity twice is an error. Pure: no I/O but :func:`load_expectation` reading the file.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from tidemark.verification.comparison import ANY_VALUE

NO_ID: Any = type("NoId", (), {"__repr__": lambda self: "NO_ID"})()
"""The id of every record when records are matched by key alone."""
_MISSING_FIELD = "<no such field>"


class ExpectationFileError(ValueError):
    """The file cannot be read or a line is not a valid expectation (the message says where)."""


def _key_text(key: Any, where: str) -> str | None:
    if key is None or isinstance(key, str):
        return key
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    raise ExpectationFileError(f"{where}: \"key\" must be a string, an integer or null, got {json.dumps(key)}")


def identity(key: str | None, record_id: Any) -> Hashable:
    """The identity of a record: its key when records are matched by key alone (``record_id`` is
    NO_ID), else ``(key, id)``, ids made hashable through their JSON text."""
    if record_id is NO_ID:
        return key
    return (key, record_id if isinstance(record_id, (str, int, float, type(None))) else json.dumps(
        record_id, sort_keys=True))


def parse_expectation(lines: Iterable[str], id_field: str | None = None, source: str = "expectation"
                      ) -> dict[Hashable, Any]:
    """Identity -> expected value (or ANY_VALUE) of every line; raises ExpectationFileError."""
    expected: dict[Hashable, Any] = {}
    first_line: dict[Hashable, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise ExpectationFileError(f"{where}: not JSON ({exc})") from None
        if not isinstance(entry, dict) or "key" not in entry:
            raise ExpectationFileError(f"{where}: expected an object with a \"key\", e.g. "
                                       '{"key": "/cart", "value": {"hits": 3}}')
        unknown = set(entry) - {"key", "value", "id"}
        if unknown:
            raise ExpectationFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                                       "a line has \"key\", \"value\" and \"id\"")
        key = _key_text(entry["key"], where)
        value = entry.get("value", ANY_VALUE)
        if "id" in entry and id_field is None:
            raise ExpectationFileError(f"{where}: an \"id\" needs --id-field, the value field that holds "
                                       "an output record's id")
        if "id" in entry:
            record_id = entry["id"]
        elif id_field is None:
            record_id = NO_ID
        elif isinstance(value, dict) and id_field in value:
            record_id = value[id_field]
        else:
            raise ExpectationFileError(f"{where}: no \"id\", and no value field {id_field!r} (--id-field) "
                                       "to take it from")
        ident = identity(key, record_id)
        if ident in first_line:
            hint = "" if id_field else "; a key with several records needs --id-field"
            raise ExpectationFileError(f"{where}: the record {json.dumps(key)}"
                                       f"{'' if record_id is NO_ID else f' id {json.dumps(record_id)}'} "
                                       f"is already listed on line {first_line[ident]}{hint}")
        first_line[ident] = number
        expected[ident] = value
    return expected


def load_expectation(path: Path, id_field: str | None = None) -> dict[Hashable, Any]:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ExpectationFileError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return parse_expectation(text.splitlines(), id_field, source=str(path))


def decode_record(key: bytes | None, value: bytes | None) -> tuple[str | None, Any]:
    """An output record as compared: the key as text, the value decoded from JSON (kept as text
    when it is not JSON, so it shows up as a wrong value)."""
    text_key = None if key is None else key.decode("utf-8", errors="replace")
    if value is None:
        return text_key, None
    try:
        return text_key, json.loads(value)
    except ValueError:
        return text_key, value.decode("utf-8", errors="replace")


def output_identity(key: str | None, value: Any, id_field: str | None) -> Hashable:
    """The identity of one decoded output record: the key, with ``id_field`` its value's field."""
    if id_field is None:
        return identity(key, NO_ID)
    return identity(key, value.get(id_field, _MISSING_FIELD) if isinstance(value, dict) else _MISSING_FIELD)
