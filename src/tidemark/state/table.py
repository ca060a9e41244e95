"""The port every keyed backend implements, and the change records it emits.

A ``StateTable`` stores one registered state. It is created by a backend when a descriptor is
first registered and lives until the backend closes. Every call acts on the backend's *current
key* (set with ``set_current_key``) and on the namespace token the caller passes. Values are
the "stored" form: plain values, or ``(value, timestamp_ms)`` pairs when the state has a TTL;
list states store a list of such elements; map states store entries under user keys.

Every mutation is reported, already serialized, to the backend's change listeners as a
:class:`KeyedStateChange`, so a changelog wrapper never re-serializes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from tidemark.protocol.messages import StateChange, StateChangeOp
from tidemark.types import Epoch, JobId, KeyGroup, TaskId
from tidemark.state.serializers import DEFAULT_SERIALIZER


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Returned by tables for an absent value (``None`` is a legal map value)."""


@dataclass(frozen=True, slots=True)
class KeyedStateChange:
    """One mutation at byte level; maps 1:1 onto ``protocol.messages.StateChange``.

    ``key`` is the stored key (``keygroups.encode_key``), ``namespace`` the encoded namespace
    (``b""`` for the default namespace). ``value`` is the serialized value for ``PUT`` (for a
    list state: the framed list), the serialized element for ``ADD``; ``user_key`` is set for
    map entries. ``CLEAR`` removes everything of (state, key, namespace).
    """

    state_name: str
    key_group: int
    key: bytes
    namespace: bytes
    op: StateChangeOp
    user_key: bytes | None = None
    value: bytes | None = None

    def to_message(self, job_id: JobId, task_id: TaskId, *, timestamp: int = 0,
                   epoch: Epoch = Epoch(0)) -> StateChange:
        """The wire record a changelog writer appends for this change."""
        return StateChange(job_id, task_id, KeyGroup(self.key_group), self.state_name, self.op,
                           self.key, self.namespace, self.user_key, self.value, timestamp, epoch)

    @classmethod
    def from_message(cls, message: StateChange) -> KeyedStateChange:
        """The change carried by a changelog record (for ``backend.apply_change``)."""
        return cls(message.state_name, message.key_group, message.key, message.namespace,
                   message.op, message.user_key, message.value)


ChangeListener = Callable[[KeyedStateChange], None]


def encode_namespace(namespace: Any) -> bytes:
    """``None`` (the default namespace) is ``b""``; anything else uses the default codec, a named
    tuple (a window, :mod:`tidemark.windows.window`) as the plain tuple it is."""
    if namespace is None:
        return b""
    if isinstance(namespace, tuple) and type(namespace) is not tuple:
        namespace = tuple(namespace)
    return DEFAULT_SERIALIZER.serialize(namespace)


def decode_namespace(data: bytes) -> Any:
    return None if not data else DEFAULT_SERIALIZER.deserialize(data)


class StateTable(Protocol):
    """Storage of one registered state, scoped to the backend's current key."""

    def namespace_token(self, namespace: Any) -> Any:
        """Opaque token for ``namespace``, passed back to every other call."""

    def get(self, ns: Any) -> Any:
        """Stored value (a list of elements for list state) or ``MISSING``."""

    def put(self, ns: Any, value: Any) -> None:
        """Replace the stored value (a non-empty list of elements for list state)."""

    def delete(self, ns: Any) -> None:
        """Remove the value, the list or every map entry of (current key, ns)."""

    def append(self, ns: Any, elements: list[Any]) -> None:
        """List state: append ``elements`` (each emitted as one ``ADD``)."""

    def get_entry(self, ns: Any, user_key: Any) -> Any:
        """Map state: stored value under ``user_key`` or ``MISSING``."""

    def put_entry(self, ns: Any, user_key: Any, value: Any) -> None: ...

    def delete_entry(self, ns: Any, user_key: Any) -> None: ...

    def entries(self, ns: Any) -> Iterator[tuple[Any, Any]]:
        """Map state: every (user_key, stored value); callers must not mutate while iterating."""

    def stored_keys(self) -> Iterator[Any]:
        """Every key with a stored value in any namespace, once each, in key-group order."""
