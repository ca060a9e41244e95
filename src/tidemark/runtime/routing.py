"""Key-group routing: which task of a stage handles a key (Flink: KeyGroupStreamPartitioner).

``key -> key group = murmur3(key) % max_parallelism -> the task whose range holds it``.
Pure and cached per key: hot keys cost one dict lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidemark.keygroups import KeyGroupRange, assign_to_key_group


class KeyGroupRouter:
    def __init__(self, max_parallelism: int, ranges: Sequence[KeyGroupRange], cache_size: int = 100_000) -> None:
        self.max_parallelism = max_parallelism
        self._owner = [-1] * max_parallelism
        for index, kgr in enumerate(ranges):
            for key_group in kgr:
                self._owner[key_group] = index
        if -1 in self._owner:
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
