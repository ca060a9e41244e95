"""Key-group routing: which task of a stage handles a key (Flink: KeyGroupStreamPartitioner),
and which partition of a key-group-partitioned channel carries a record.

``key -> key group = murmur3(key) % max_parallelism -> the task whose range holds it``.
Pure and cached per key: hot keys cost one dict lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidemark.keygroups import KeyGroupRange, assign_to_key_group
from tidemark.api import Stage
from tidemark.runtime.job.ownership import channel_partition


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


class KeyPartitioner:
    """The partition of a key in a channel of ``partitions`` partitions partitioned by key group
    (:func:`tidemark.runtime.job.ownership.channel_partition`)."""

    def __init__(self, max_parallelism: int, partitions: int) -> None:
        self.max_parallelism = max_parallelism
        self.partitions = partitions

    def of_key(self, key: Any) -> int:
        return channel_partition(assign_to_key_group(key, self.max_parallelism), self.max_parallelism, self.partitions)


class ChannelPartitioner(KeyPartitioner):
    """The partition of a record written to a channel partitioned by the key group of the reading
    stage's key: decodes and keys the record as ``reader`` will its input ``topic`` (the channel,
    or for an exchange reader's records the input topic they come from); raises when it cannot."""

    def __init__(self, reader: Stage, topic: str, max_parallelism: int, partitions: int) -> None:
        super().__init__(max_parallelism, partitions)
        item = next(i for i in reader.input_list if i.topic == topic)
        self._decode = reader.decode_of(item)
        self._key_by = reader.key_of(item)

    def __call__(self, key: bytes | None, value: bytes | None) -> int:
        return self.of_key(self._key_by(self._decode(key, value)))  # type: ignore[misc]
