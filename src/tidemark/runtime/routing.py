"""Key-group routing: which task of a stage handles a key (Flink: KeyGroupStreamPartitioner),
and which partition of a key-group-partitioned channel carries a record.

``key -> key group = murmur3(key) % max_parallelism -> the task whose range holds it``.
Pure and cached per key: hot keys cost one dict lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidemark.keygroups import KeyGroupRange, assign_to_key_group
from tidemark.runtime.api import Stage
from tidemark.runtime.ownership import channel_partition


class KeyGroupRouter:
    """``task_index(key)``: the index in ``ranges`` of the task that owns ``key``; -1 when none of
    them does (a worker owning only some of the stage's tasks, ``complete=False``)."""

    def __init__(self, max_parallelism: int, ranges: Sequence[KeyGroupRange], cache_size: int = 100_000,
                 complete: bool = True) -> None:
        self.max_parallelism = max_parallelism
        self._owner = [-1] * max_parallelism
        for index, kgr in enumerate(ranges):
            for key_group in kgr:
                self._owner[key_group] = index
        if complete and -1 in self._owner:
            raise ValueError("the task ranges do not cover every key group")
        self._cache: dict[Any, int] = {}
        self._cache_size = cache_size

    def task_index(self, key: Any) -> int:
        index = self._cache.get(key)
        if index is None:
            index = self._owner[assign_to_key_group(key, self.max_parallelism)]
            if len(self._cache) < self._cache_size:
                self._cache[key] = index
        return index


class ChannelPartitioner:
    """The partition of a channel into ``partitions`` partitions, partitioned by the key group of
    the reading stage's key (:func:`tidemark.runtime.ownership.channel_partition`): decodes and
    keys a written record as ``reader`` will; raises when it cannot."""

    def __init__(self, reader: Stage, max_parallelism: int, partitions: int) -> None:
        self._decode = reader.decode
        self._key_by = reader.key_by
        self.max_parallelism = max_parallelism
        self.partitions = partitions

    def __call__(self, key: bytes | None, value: bytes | None) -> int:
        return self.of_value(self._decode(key, value))

    def decode(self, key: bytes | None, value: bytes | None) -> Any:
        """A written record as the reading stage decodes it."""
        return self._decode(key, value)

    def of_value(self, value: Any) -> int:
        """The partition of a decoded value."""
        group = assign_to_key_group(self._key_by(value), self.max_parallelism)
        return channel_partition(group, self.max_parallelism, self.partitions)
