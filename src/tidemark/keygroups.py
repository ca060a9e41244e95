"""Key groups: the unit of keyed-state redistribution, with Flink's formulas.

Key-bytes rule (other languages must reproduce it exactly):

* ``str``   -> its UTF-8 encoding;
* ``bytes`` -> the bytes themselves (``bytearray``/``memoryview`` are not keys);
* ``int``   -> 8-byte big-endian two's complement (so ``-2**63 <= key < 2**63``).

``bool`` and every other type are refused. The key group of a key is
``murmur3_x86_32(key_bytes, seed=0)`` read as an unsigned 32-bit integer, modulo
``max_parallelism``. Ranges and operator indexes follow Flink's ``KeyGroupRangeAssignment``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterator

from mmh3 import hash as _mmh3_hash

from tidemark.types import KeyGroup

UPPER_BOUND_MAX_PARALLELISM = 1 << 15
"""Largest allowed max_parallelism (Flink's bound); key groups fit in two bytes."""

DEFAULT_MAX_PARALLELISM = 128

_PACK_Q = struct.Struct(">q").pack


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit of ``data`` as an unsigned 32-bit integer (mmh3's C implementation;
    ``seed`` is taken modulo 2**32)."""
    return _mmh3_hash(data, seed & 0xFFFFFFFF, False)


def hash_key_bytes(data: bytes) -> int:
    """``murmur3_x86_32(data, seed=0)``: the hash of every key group."""
    return _mmh3_hash(data, 0, False)


def key_to_bytes(key: Any) -> bytes:
    """The key bytes of ``key`` under the key-bytes rule; ``TypeError`` for other types."""
    kind = type(key)
    if kind is str:
        return key.encode("utf-8")
    if kind is bytes:
        return key
    if kind is int:
        try:
            return _PACK_Q(key)
        except struct.error:
            raise ValueError(f"int key out of the signed 64-bit range: {key}") from None
    raise TypeError(f"a state key must be str, bytes or int, not {kind.__name__}")


def check_max_parallelism(max_parallelism: int) -> None:
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max_parallelism must be in [1, {UPPER_BOUND_MAX_PARALLELISM}], got {max_parallelism}"
        )


def _check_parallelism(max_parallelism: int, parallelism: int) -> None:
    check_max_parallelism(max_parallelism)
    if not 1 <= parallelism <= max_parallelism:
        raise ValueError(
            f"parallelism must be in [1, max_parallelism={max_parallelism}], got {parallelism}"
        )


def assign_key_bytes_to_key_group(key_bytes: bytes, max_parallelism: int) -> KeyGroup:
    """Key group of already-encoded key bytes."""
    return KeyGroup(hash_key_bytes(key_bytes) % max_parallelism)


def assign_to_key_group(key: Any, max_parallelism: int) -> KeyGroup:
    """Key group of ``key`` (see the key-bytes rule in the module docstring)."""
    check_max_parallelism(max_parallelism)
    return KeyGroup(hash_key_bytes(key_to_bytes(key)) % max_parallelism)


@dataclass(frozen=True, slots=True)
class KeyGroupRange:
    """Inclusive range ``[start, end]`` of key groups; ``end == start - 1`` is empty."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start - 1:
            raise ValueError(f"invalid key-group range [{self.start}, {self.end}]")

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __iter__(self) -> Iterator[KeyGroup]:
        return (KeyGroup(kg) for kg in range(self.start, self.end + 1))

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        start, end = max(self.start, other.start), min(self.end, other.end)
        return KeyGroupRange(start, end) if start <= end else KeyGroupRange(start, start - 1)

    @classmethod
    def of(cls, max_parallelism: int) -> KeyGroupRange:
        """Every key group of a job with ``max_parallelism``."""
        return cls(0, max_parallelism - 1)


# Arithmetic kernels: plain integer arithmetic, so they also work element-wise on numpy arrays.


def range_start(max_parallelism: Any, parallelism: Any, operator_index: Any) -> Any:
    return (operator_index * max_parallelism + parallelism - 1) // parallelism


def range_end(max_parallelism: Any, parallelism: Any, operator_index: Any) -> Any:
    return ((operator_index + 1) * max_parallelism - 1) // parallelism


def operator_index(max_parallelism: Any, parallelism: Any, key_group: Any) -> Any:
    return key_group * parallelism // max_parallelism


def compute_key_group_range(
    max_parallelism: int, parallelism: int, operator_index_: int
) -> KeyGroupRange:
    """Key groups owned by subtask ``operator_index_`` (Flink's formula, inclusive range)."""
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= operator_index_ < parallelism:
        raise ValueError(f"operator index {operator_index_} not in [0, {parallelism})")
    return KeyGroupRange(
        range_start(max_parallelism, parallelism, operator_index_),
        range_end(max_parallelism, parallelism, operator_index_),
    )


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    """Subtask that owns ``key_group`` at ``parallelism`` (Flink's formula)."""
    _check_parallelism(max_parallelism, parallelism)
    if not 0 <= key_group < max_parallelism:
        raise ValueError(f"key group {key_group} not in [0, {max_parallelism})")
    return int(operator_index(max_parallelism, parallelism, key_group))


# Stored key: how a key is written inside snapshots and RocksDB (decodable, unlike key bytes).
KEY_TAGS = {str: b"s", bytes: b"b", int: b"i"}


def encode_key(key: Any) -> bytes:
    """One type tag (``s``/``b``/``i``) followed by the key bytes."""
    key_bytes = key_to_bytes(key)  # raises for unsupported types first
    return KEY_TAGS[type(key)] + key_bytes


def decode_key(stored: bytes) -> Any:
    """Inverse of :func:`encode_key`."""
    tag, body = stored[:1], stored[1:]
    if tag == b"s":
        return body.decode("utf-8")
    if tag == b"b":
        return bytes(body)
    if tag == b"i" and len(body) == 8:
        return struct.unpack(">q", body)[0]
    raise ValueError(f"not a stored key: {stored[:16]!r}")
