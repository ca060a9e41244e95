"""Operator (non-keyed) state: even-split lists, union lists and broadcast maps.

Lifecycle of :class:`OperatorStateBackend`: construct for one subtask -> optionally ``restore``
(once, before any state is requested) with the handles of every old subtask -> get states and
use them -> ``snapshot`` any number of times -> ``close``.

Snapshot file (one per subtask; integers big-endian)::

    b"TMOSNAP1" | u32 len + JSON header {"format": 1, "checkpoint_id", "subtask_index",
    "parallelism", "states": [{"name", "mode", "value_serializer", "user_key_serializer"}]}
    | per state, in header order: u32 count + items (list: u32 len + element;
      broadcast: u32 len + key, u32 len + value) | 32-byte SHA-256 of all preceding bytes
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from tidemark.protocol.messages import StateHandle, StateHandleKind
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.descriptors import ListStateDescriptor
from tidemark.state.rescale import redistribute_list
from tidemark.state.schema_evolution import check_registration, resolve_entries
from tidemark.state.serializers import DEFAULT_SERIALIZER, Serializer, describe
from tidemark.state.snapshot import SnapshotFormatError
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, KeyGroup, OperatorId, OperatorStateMode

MAGIC = b"TMOSNAP1"
_U32 = struct.Struct(">I")


@dataclass(frozen=True)
class BroadcastStateDescriptor:
    """A map replicated identically on every subtask."""

    name: str
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None


class OperatorListState:
    """A list owned by one subtask (redistributed by mode on rescale)."""

    def __init__(self, items: list[Any]) -> None:
        self._items = items

    def get(self) -> list[Any]:
        return list(self._items)

    def add(self, value: Any) -> None:
        if value is None:
            raise ValueError("null elements are not allowed")
        self._items.append(value)

    def add_all(self, values: Iterable[Any]) -> None:
        for value in values:
            self.add(value)

    def update(self, values: Iterable[Any]) -> None:
        self._items[:] = []
        self.add_all(values)

    def clear(self) -> None:
        self._items[:] = []


class BroadcastState:
    """A map that every subtask holds identically (update it from broadcast input only)."""

    def __init__(self, entries: dict[Any, Any]) -> None:
        self._entries = entries

    def get(self, key: Any) -> Any:
        return self._entries.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._entries[key] = value

    def put_all(self, mapping: dict[Any, Any]) -> None:
        self._entries.update(mapping)

    def remove(self, key: Any) -> None:
        self._entries.pop(key, None)

    def contains(self, key: Any) -> bool:
        return key in self._entries

    def keys(self) -> Iterator[Any]:
        return iter(list(self._entries))

    def values(self) -> Iterator[Any]:
        return iter(list(self._entries.values()))

    def items(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self._entries.items()))

    def is_empty(self) -> bool:
        return not self._entries

    def clear(self) -> None:
        self._entries.clear()


@dataclass
class _Registered:
    mode: OperatorStateMode
    value_serializer: Serializer
    key_serializer: Serializer
    data: list[Any] | dict[Any, Any]


class OperatorStateBackend:
    """Operator state of subtask ``subtask_index`` of ``parallelism`` (see module docstring)."""

    def __init__(self, *, operator_id: str = "operator", subtask_index: int = 0,
                 parallelism: int = 1) -> None:
        if not 0 <= subtask_index < parallelism:
            raise ValueError(f"subtask index {subtask_index} not in [0, {parallelism})")
        self.operator_id = OperatorId(operator_id)
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self._states: dict[str, _Registered] = {}
        self._restored: dict[str, tuple[dict[str, Any], list[Any]]] = {}

    # ------------------------------------------------------------------ registration

    def get_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Even-split redistribution on rescale (Flink: getListState)."""
        return OperatorListState(self._register_list(descriptor, OperatorStateMode.SPLIT_DISTRIBUTE))

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Every new subtask receives the whole list on restore (Flink: getUnionListState)."""
        return OperatorListState(self._register_list(descriptor, OperatorStateMode.UNION))

    def get_broadcast_state(self, descriptor: BroadcastStateDescriptor) -> BroadcastState:
        ser = descriptor.value_serializer or DEFAULT_SERIALIZER
        keys = descriptor.key_serializer or DEFAULT_SERIALIZER
        registered = self._register(descriptor.name, OperatorStateMode.BROADCAST, ser, keys)
        return BroadcastState(registered.data)  # type: ignore[arg-type]

    def _register_list(self, descriptor: ListStateDescriptor, mode: OperatorStateMode) -> list[Any]:
        ser = descriptor.serializer or DEFAULT_SERIALIZER
        return self._register(descriptor.name, mode, ser, DEFAULT_SERIALIZER).data  # type: ignore[return-value]

    def _register(self, name: str, mode: OperatorStateMode, ser: Serializer,
                  keys: Serializer) -> _Registered:
        existing = self._states.get(name)
        if existing is not None:
            if existing.mode is not mode:
                raise ValueError(f"operator state {name!r} is registered as {existing.mode.value}")
            return existing
        data: list[Any] | dict[Any, Any] = {} if mode is OperatorStateMode.BROADCAST else []
        restored = self._restored.pop(name, None)
        if restored is not None:
            meta, items = restored
            if meta["mode"] != mode.value:
                raise ValueError(f"operator state {name!r} was snapshotted as {meta}")
            migrate = _migration(name, meta, ser, keys)
            if mode is OperatorStateMode.BROADCAST:
                data = {keys.deserialize(k): ser.deserialize(migrate(v)) for k, v in items}
            else:
                data = [ser.deserialize(migrate(item)) for item in items]
        registered = _Registered(mode, ser, keys, data)
        self._states[name] = registered
        return registered

    # ------------------------------------------------------------------ snapshot / restore

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage) -> list[StateHandle]:
        """One OPERATOR handle with every state of this subtask (key groups -1, -1)."""
        return self.snapshot_async(checkpoint_id, storage).run()

    def snapshot_async(self, checkpoint_id: CheckpointId, storage: CheckpointStorage
                       ) -> AsyncSnapshot[list[StateHandle]]:
        """:meth:`snapshot` in two parts: the states serialized now, the file written by ``run``."""
        data = self._encode(checkpoint_id)
        path = f"{self.operator_id}/chk-{int(checkpoint_id)}/op-{self.subtask_index}.tmos"

        def write() -> list[StateHandle]:
            ref = storage.write_bytes(path, data)
            return [StateHandle(StateHandleKind.OPERATOR, self.operator_id, KeyGroup(-1), KeyGroup(-1),
                                (ref,), ref.size_bytes, ref.size_bytes)]

        return AsyncSnapshot(write)

    def _encode(self, checkpoint_id: CheckpointId) -> bytes:
        """Every state of this subtask in the snapshot format."""
        metas, bodies = [], []
        for name in sorted(self._states):
            state = self._states[name]
            metas.append({"name": name, "mode": state.mode.value,
                          "value_serializer": describe(state.value_serializer),
                          "user_key_serializer": describe(state.key_serializer)})
            bodies.append(self._encode_items(state))
        for name, (meta, items) in sorted(self._restored.items()):  # restored, never requested
            metas.append(meta)
            bodies.append(_encode_raw(meta["mode"], items))
        header = {"format": 1, "checkpoint_id": int(checkpoint_id),
                  "subtask_index": self.subtask_index, "parallelism": self.parallelism,
                  "states": metas}
        head = json.dumps(header, sort_keys=True).encode()
        body = MAGIC + _U32.pack(len(head)) + head + b"".join(bodies)
        return body + hashlib.sha256(body).digest()

    def _encode_items(self, state: _Registered) -> bytes:
        ser, keys = state.value_serializer, state.key_serializer
        if state.mode is OperatorStateMode.BROADCAST:
            items: list[Any] = [(keys.serialize(k), ser.serialize(v)) for k, v in state.data.items()]  # type: ignore[union-attr]
        else:
            items = [ser.serialize(v) for v in state.data]
        return _encode_raw(state.mode.value, items)

    def restore(self, handles: Sequence[StateHandle], storage: CheckpointStorage) -> None:
        """Redistribute the states in ``handles`` (one per old subtask) by their modes."""
        if self._states:
            raise ValueError("restore must happen before any operator state is requested")
        olds = []
        for handle in handles:
            if handle.kind is not StateHandleKind.OPERATOR:
                raise ValueError(f"not an operator state handle: {handle.kind.value}")
            for ref in handle.files:
                olds.append(_decode(storage.read_verified(ref), ref.path))
        olds.sort(key=lambda old: old[0]["subtask_index"])
        names = sorted({meta["name"] for header, states in olds for meta in header["states"]})
        for name in names:
            metas = [m for header, _ in olds for m in header["states"] if m["name"] == name]
            mode = OperatorStateMode(metas[0]["mode"])
            lists = [states.get(name, []) for _, states in olds]
            mine = redistribute_list(lists, mode, self.parallelism, self.subtask_index)
            self._restored[name] = (metas[0], mine)

    def close(self) -> None:
        self._states.clear()
        self._restored.clear()


def _frame(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _encode_raw(mode: str, items: list[Any]) -> bytes:
    out = io.BytesIO()
    out.write(_U32.pack(len(items)))
    for item in items:
        if mode == OperatorStateMode.BROADCAST.value:
            out.write(_frame(item[0]) + _frame(item[1]))
        else:
            out.write(_frame(item))
    return out.getvalue()


def snapshot_state_names(data: bytes, name: str) -> list[str]:
    """The names of the operator states in one subtask's snapshot file ``data`` (at ``name``),
    from its header alone."""
    header, _ = _header(data, name)
    return [meta["name"] for meta in header["states"]]


def snapshot_header(data: bytes, name: str) -> dict[str, Any]:
    """The header of one subtask's snapshot file ``data`` (at ``name``): its subtask, parallelism
    and each state's name, mode and serializers."""
    return _header(data, name)[0]


def read_snapshot(data: bytes, name: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """One subtask's snapshot file: its header, and each state's serialized items (a list
    state's elements; a broadcast state's ``(key, value)`` pairs), in the file's order."""
    return _decode(data, name)


def _header(data: bytes, name: str) -> tuple[dict[str, Any], int]:
    """The checked snapshot's header and the offset of the states after it."""
    if len(data) < len(MAGIC) + 36 or not data.startswith(MAGIC):
        raise SnapshotFormatError(f"{name}: not an operator state snapshot")
    if hashlib.sha256(data[:-32]).digest() != data[-32:]:
        raise SnapshotFormatError(f"{name}: snapshot checksum mismatch (corrupted file)")
    (size,) = _U32.unpack_from(data, len(MAGIC))
    pos = len(MAGIC) + 4
    return json.loads(data[pos : pos + size]), pos + size


def _decode(data: bytes, name: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    header, pos = _header(data, name)
    states: dict[str, list[Any]] = {}

    def take() -> bytes:
        nonlocal pos
        (length,) = _U32.unpack_from(data, pos)
        pos += 4 + length
        return data[pos - length : pos]

    for meta in header["states"]:
        (count,) = _U32.unpack_from(data, pos)
        pos += 4
        broadcast = meta["mode"] == OperatorStateMode.BROADCAST.value
        states[meta["name"]] = [(take(), take()) if broadcast else take() for _ in range(count)]
    return header, states


def _migration(name: str, meta: dict[str, Any], values: Serializer, keys: Serializer) -> Callable[[bytes], bytes]:
    """How the restored operator state ``name``'s values are read by ``values`` (its keys must
    be read as they are; :mod:`tidemark.state.schema_evolution`)."""
    resolution = resolve_entries({"user_key_serializer": describe(DEFAULT_SERIALIZER), **meta},
                                 {"user_key_serializer": describe(keys), "value_serializer": describe(values)})
    check_registration(name, resolution)
    return resolution.migrate or (lambda data: data)
