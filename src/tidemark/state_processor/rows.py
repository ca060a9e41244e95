"""Rows of state: canonical snapshot entries decoded with the serializers the snapshot records.

A :class:`StateRow` is one value of one state: ``(key, namespace, value, key_group, task)``, and
for a map state one row per map entry (``user_key`` set). The key is the job's key as it was
keyed (``str``, ``int`` or ``bytes``); the namespace is ``None`` for a function's own state and
the window for a window's; the value is decoded with the state's value serializer (a list
state's value is the list of its elements; an aggregating state's, its accumulator; TTL
timestamps are dropped). A serializer with an Avro schema decodes to the datum (a dataclass's
fields as a dict: the job's code is not needed).

:func:`json_compatible` turns any decoded value into what JSON can hold, the form of the value
columns of the Spark source and of JSON lines: tuples become arrays, bytes base64 text, a map
whose keys are not all strings an array of ``[key, value]`` pairs.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.keygroups import decode_key
from tidemark.state.descriptors import StateKind
from tidemark.state.serializers import DEFAULT_SERIALIZER, Serializer, serializer_from_config, unframe_elements
from tidemark.state.snapshot import Entry
from tidemark.state.table import decode_namespace
from tidemark.state.ttl import TtlSerializer


@dataclass(frozen=True, slots=True)
class StateRow:
    key: Any
    namespace: Any
    user_key: Any
    value: Any
    key_group: int
    task: str

    def to_json(self) -> dict[str, Any]:
        """The row with JSON-compatible columns (:func:`json_compatible`)."""
        return {"key": json_compatible(self.key), "namespace": json_compatible(self.namespace),
                "user_key": json_compatible(self.user_key), "value": json_compatible(self.value),
                "key_group": self.key_group, "task": self.task}


def _serializer(described: dict[str, Any]) -> Serializer:
    return serializer_from_config(described["id"], described.get("config") or {})


class EntryDecoder:
    """Decodes the entries of one state, given the definition its snapshot records (``state_meta``)."""

    def __init__(self, meta: dict[str, Any]) -> None:
        self.name = meta["name"]
        self.kind = StateKind(meta["kind"])
        inner = _serializer(meta["value_serializer"])
        self._values: Serializer = TtlSerializer(inner) if meta.get("ttl_ms") is not None else inner
        self._ttl = meta.get("ttl_ms") is not None
        self._user_keys = _serializer(meta["user_key_serializer"])

    def _value(self, data: bytes) -> Any:
        value = self._values.deserialize(data)
        return value[0] if self._ttl else value

    def row(self, entry: Entry, task: str) -> StateRow:
        if self.kind is StateKind.LIST:
            value: Any = [self._value(element) for element in unframe_elements(entry.value)]
        else:
            value = self._value(entry.value)
        user_key = None if entry.user_key is None else self._user_keys.deserialize(entry.user_key)
        return StateRow(decode_key(entry.key), decode_namespace(entry.namespace), user_key, value,
                        entry.key_group, task)


def decode_rows(entries: Iterator[Entry], decoders: dict[str, EntryDecoder],
                task: str) -> Iterator[tuple[str, StateRow]]:
    """``(state name, row)`` of each entry whose state has a decoder (the others are skipped)."""
    for entry in entries:
        decoder = decoders.get(entry.state_name)
        if decoder is not None:
            yield entry.state_name, decoder.row(entry, task)


def json_compatible(value: Any) -> Any:
    """``value`` as JSON can hold it (see the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (list, tuple)):
        return [json_compatible(item) for item in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: json_compatible(v) for k, v in value.items()}
        return [[json_compatible(k), json_compatible(v)] for k, v in value.items()]
    return str(value)


@dataclass(frozen=True, slots=True)
class TimerRow:
    """One timer: its key, namespace (``None``: a function's own), time domain and timestamp."""

    key: Any
    namespace: Any
    domain: str
    timestamp: int
    key_group: int
    task: str

    def to_json(self) -> dict[str, Any]:
        return {"key": json_compatible(self.key), "namespace": json_compatible(self.namespace),
                "domain": self.domain, "timestamp": self.timestamp, "key_group": self.key_group, "task": self.task}


@dataclass(frozen=True, slots=True)
class OperatorStateRow:
    """One item of an operator state as an old subtask snapshotted it: a list state's element
    (``key`` None) or a broadcast state's entry."""

    state: str
    mode: str
    subtask: int
    key: Any
    value: Any

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "mode": self.mode, "subtask": self.subtask,
                "key": json_compatible(self.key), "value": json_compatible(self.value)}


def operator_rows(header: dict[str, Any], states: dict[str, list[Any]]) -> Iterator[OperatorStateRow]:
    """The items of one subtask's operator-state file (:func:`tidemark.state.operator.read_snapshot`)."""
    subtask = int(header["subtask_index"])
    for meta in header["states"]:
        values = _serializer(meta["value_serializer"])
        keys = _serializer(meta.get("user_key_serializer") or {"id": DEFAULT_SERIALIZER.serializer_id})
        for item in states.get(meta["name"], []):
            if isinstance(item, tuple):
                yield OperatorStateRow(meta["name"], meta["mode"], subtask, keys.deserialize(item[0]),
                                       values.deserialize(item[1]))
            else:
                yield OperatorStateRow(meta["name"], meta["mode"], subtask, None, values.deserialize(item))


@dataclass(frozen=True, slots=True)
class SourcePositionRow:
    """The next offset of one source partition an old task read."""

    stage: str
    task: str
    topic: str
    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "task": self.task, "topic": self.topic, "partition": self.partition,
                "offset": self.offset}
