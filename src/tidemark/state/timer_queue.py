"""The timer queue: the one storage interface of timers that every keyed backend provides.

A keyed backend holds one :class:`TimerQueue` per queue name (the timer service asks for one per
time domain, ``"event-time"`` and ``"processing-time"``; Flink's ``KeyGroupedInternalPriorityQueue``
of ``TimerHeapInternalTimer``). A queue is a set of (key, namespace, timestamp) triples, each at
most once. The namespace scopes a timer as it scopes state (a window, :mod:`tidemark.windows`;
``None``, the default namespace, for a function's own timers). Timers are ordered by (timestamp,
key, namespace), compared as bytes: ``u32 length + stored key`` then the encoded namespace, where
the stored key is ``keygroups.encode_key(key)`` and the namespace ``table.encode_namespace``, so the
order is the same on every backend. ``add``, ``remove``, ``contains`` and ``timestamps`` act on
the backend's current key (as state handles do); ``peek`` and ``poll`` see every key of the
backend's key groups and do not change the current key.

Canonical form: timers are written into snapshots, changelogs and change listeners as the map
state ``_timers.<name>`` (:func:`timer_state_name`; per key and namespace, one entry timestamp ->
``True``, with the default serializers of :func:`timer_state_descriptor`), the form this state had
before timers got queues of their own. So a canonical snapshot with timers is readable by every
backend whichever wrote it, older snapshots restore unchanged (their timers are in the default
namespace), and a change recorded by one backend replays into another (``apply_change``). The
state name is reserved: ``get_state`` refuses a descriptor named ``_timers.*``.

Lifecycle: a backend creates a queue on the first ``backend.timer_queue(name)`` (after its
restore) or when a restore or a replayed change brings timers of that name; the queue lives until
the backend closes. Every mutation made through ``add``, ``remove`` and ``poll`` is reported,
already serialized, to the backend's change listeners; ``apply_change`` is not.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import Any

from tidemark.protocol.messages import StateChangeOp
from tidemark.state.descriptors import MapStateDescriptor, user_key_serializer_of, value_serializer_of
from tidemark.state.table import KeyedStateChange

TIMER_STATE_PREFIX = "_timers."
MIN_TIMESTAMP = -(1 << 63)
MAX_TIMESTAMP = (1 << 63) - 1


def timer_state_name(queue_name: str) -> str:
    """The state name of a queue's canonical form (``_timers.<name>``)."""
    return TIMER_STATE_PREFIX + queue_name


def is_timer_state(state_name: str) -> bool:
    return state_name.startswith(TIMER_STATE_PREFIX)


def queue_name_of(state_name: str) -> str:
    """Inverse of :func:`timer_state_name`."""
    if not is_timer_state(state_name):
        raise ValueError(f"{state_name!r} is not a timer state")
    return state_name[len(TIMER_STATE_PREFIX):]


def timer_state_descriptor(queue_name: str) -> MapStateDescriptor:
    """The descriptor of a queue's canonical form (what snapshots and changelogs record)."""
    return MapStateDescriptor(timer_state_name(queue_name))


_DESCRIPTOR = timer_state_descriptor("canonical")
_TIMESTAMPS = user_key_serializer_of(_DESCRIPTOR)
TIMER_VALUE = value_serializer_of(_DESCRIPTOR).serialize(True)
"""The canonical value of every timer entry."""
_PACK_TIMESTAMP = struct.Struct(">q").pack


def encode_timestamp(timestamp: int) -> bytes:
    """The canonical user key of a timer entry: what the default serializer writes for a signed
    64-bit integer (its tag ``i``, then 8 bytes big-endian), written here directly because
    every timer change needs it."""
    return b"i" + _PACK_TIMESTAMP(timestamp)


if encode_timestamp(-1) != _TIMESTAMPS.serialize(-1):  # the shortcut must stay the serializer's form
    raise AssertionError("encode_timestamp disagrees with the timer state's key serializer")


def decode_timestamp(data: bytes) -> int:
    return int(_TIMESTAMPS.deserialize(data))


def check_timestamp(timestamp: int) -> int:
    """``timestamp`` if every backend can store it (a signed 64-bit integer), else ``ValueError``."""
    if not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
        raise ValueError(f"a timer timestamp must be a signed 64-bit integer, got {timestamp}")
    return timestamp


def timer_change(state_name: str, key_group: int, stored_key: bytes, namespace: bytes, timestamp: int,
                 added: bool) -> KeyedStateChange:
    """The canonical change of one timer added (``PUT``) or removed (``DELETE``); ``namespace``
    encoded (``b""``: the default namespace)."""
    if added:
        return KeyedStateChange(state_name, key_group, stored_key, namespace, StateChangeOp.PUT,
                                encode_timestamp(timestamp), TIMER_VALUE)
    return KeyedStateChange(state_name, key_group, stored_key, namespace, StateChangeOp.DELETE,
                            encode_timestamp(timestamp), None)


_U32 = struct.Struct(">I").pack


def timer_order(stored_key: bytes, namespace: bytes) -> bytes:
    """What orders two timers of one timestamp: ``u32 length + stored key``, then the encoded
    namespace (the bytes after the timestamp in the RocksDB queue's keys)."""
    return _U32(len(stored_key)) + stored_key + namespace


Due = tuple[int, Any, Any]
"""A timer as ``peek`` and ``poll`` return it: ``(timestamp, key, namespace)``."""


class TimerQueue(ABC):
    """One queue of timers of a keyed backend; see the module docstring."""

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def add(self, timestamp: int, namespace: Any = None) -> bool:
        """A timer of the current key in ``namespace`` at ``timestamp``; False (nothing changes)
        if it exists."""

    @abstractmethod
    def remove(self, timestamp: int, namespace: Any = None) -> bool:
        """Remove the current key's timer in ``namespace`` at ``timestamp``; False if there is none."""

    @abstractmethod
    def contains(self, timestamp: int, namespace: Any = None) -> bool:
        """Whether the current key has a timer in ``namespace`` at ``timestamp``."""

    @abstractmethod
    def timestamps(self, namespace: Any = None) -> list[int]:
        """The current key's timers in ``namespace``, ascending."""

    @abstractmethod
    def peek(self) -> Due | None:
        """The first timer in (timestamp, key, namespace) order; None if empty."""

    @abstractmethod
    def poll(self, until: int) -> Due | None:
        """Remove and return the first timer if its timestamp is at most ``until``, else None."""

    @abstractmethod
    def __len__(self) -> int:
        """How many timers the queue holds, over every key."""

    @abstractmethod
    def apply_change(self, change: KeyedStateChange) -> None:
        """Replay a change of the canonical form (restore, changelog replay): ``PUT`` adds the
        entry's timer, ``DELETE`` removes it, ``CLEAR`` removes every timer of the key in the
        change's namespace. Listeners are not notified."""
