"""State time-to-live, as in Flink (processing time only).

A TTL-enabled state stores each value (each list element, each map entry) together with its
last-access timestamp in milliseconds. A value is expired once ``timestamp + ttl <= now``.

* ``update_type="on_create_and_write"``: writes refresh the timestamp;
  ``"on_read_and_write"``: successful reads refresh it too.
* ``visibility="never_return_expired"``: an expired value reads as absent;
  ``"return_expired_if_not_cleaned_up"``: it is returned once, by the read that discovers it.
  Either way, the read that discovers an expired value removes it (cleanup on access).
* Full snapshots drop expired values; iteration (map reads, ``cleanup_expired``) removes them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Protocol

from tidemark import clock
from tidemark.state.serializers import SerializationError, Serializer

UPDATE_TYPES = ("on_create_and_write", "on_read_and_write")
VISIBILITIES = ("never_return_expired", "return_expired_if_not_cleaned_up")


@dataclass(frozen=True, slots=True)
class StateTtlConfig:
    """TTL options of one state descriptor."""

    ttl_seconds: float
    update_type: str = "on_create_and_write"
    visibility: str = "never_return_expired"

    def __post_init__(self) -> None:
        if not self.ttl_seconds > 0:
            raise ValueError(f"ttl_seconds must be > 0, got {self.ttl_seconds}")
        if self.update_type not in UPDATE_TYPES:
            raise ValueError(f"update_type must be one of {UPDATE_TYPES}")
        if self.visibility not in VISIBILITIES:
            raise ValueError(f"visibility must be one of {VISIBILITIES}")

    @property
    def ttl_ms(self) -> int:
        return int(round(self.ttl_seconds * 1000))

    @property
    def update_on_read(self) -> bool:
        return self.update_type == "on_read_and_write"

    @property
    def return_expired(self) -> bool:
        return self.visibility == "return_expired_if_not_cleaned_up"


class Clock(Protocol):
    """Processing-time source for TTL; injected into a backend, used for its whole life."""

    def now_ms(self) -> int: ...


class SystemClock:
    """Wall-clock processing time (:func:`tidemark.clock.now_ms`)."""

    def now_ms(self) -> int:
        return clock.now_ms()


class ManualClock:
    """A clock that only moves when told to (tests, replays)."""

    def __init__(self, now_ms: int = 0) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms

    def set(self, now_ms: int) -> None:
        self._now = now_ms


def is_expired(timestamp_ms: int, ttl_ms: int, now_ms: int) -> bool:
    return timestamp_ms + ttl_ms <= now_ms


_TS = struct.Struct(">q")


class TtlSerializer:
    """Wraps a serializer: ``(value, timestamp_ms)`` <-> 8-byte timestamp + inner bytes."""

    def __init__(self, inner: Serializer) -> None:
        self.inner = inner
        self.serializer_id = inner.serializer_id

    def serialize(self, value: tuple[Any, int]) -> bytes:
        return _TS.pack(value[1]) + self.inner.serialize(value[0])

    def deserialize(self, data: bytes) -> tuple[Any, int]:
        if len(data) < 8:
            raise SerializationError("TTL value shorter than its timestamp")
        return (self.inner.deserialize(data[8:]), _TS.unpack_from(data)[0])

    def config(self) -> dict[str, Any]:
        return self.inner.config()


def timestamp_of(data: bytes) -> int:
    """Timestamp of a serialized TTL value without decoding the value."""
    return _TS.unpack_from(data)[0]
