"""Reference counts of shared state files (Flink: SharedStateRegistry).

Lifecycle: ``register(owner, files)`` when a checkpoint or savepoint starts being retained,
``release(owner)`` when it is discarded; ``release`` returns exactly the shared paths that no
retained owner references any more, which are then (and only then) safe to delete. Files with
``shared=False`` are ignored here: they belong to their one checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidemark.protocol.messages import StateFile
from tidemark.types import CheckpointId


class SharedStateRegistry:
    """Counts, for each shared path, how many retained checkpoints/savepoints reference it."""

    def __init__(self) -> None:
        self._refs: dict[str, int] = {}
        self._owners: dict[CheckpointId, frozenset[str]] = {}

    def register(self, owner: CheckpointId, files: Iterable[StateFile]) -> None:
        """Count each distinct shared path of ``owner`` once; registering twice is an error."""
        if owner in self._owners:
            raise ValueError(f"checkpoint {owner} is already registered")
        paths = frozenset(f.path for f in files if f.shared)
        self._owners[owner] = paths
        for path in paths:
            self._refs[path] = self._refs.get(path, 0) + 1

    def release(self, owner: CheckpointId) -> tuple[str, ...]:
        """Drop ``owner``'s references; the shared paths now unreferenced, sorted."""
        paths = self._owners.pop(owner, None)
        if paths is None:
            return ()
        freed = []
        for path in paths:
            count = self._refs[path] - 1
            if count:
                self._refs[path] = count
            else:
                del self._refs[path]
                freed.append(path)
        return tuple(sorted(freed))

    def reference_count(self, path: str) -> int:
        return self._refs.get(path, 0)

    def reference_counts(self) -> dict[str, int]:
        """A copy of every non-zero count."""
        return dict(self._refs)

    def is_registered(self, owner: CheckpointId) -> bool:
        return owner in self._owners
