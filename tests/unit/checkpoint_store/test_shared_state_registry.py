"""Reference counting of shared files."""

from __future__ import annotations

import pytest
from store_support import private_file, shared_file

from tidemark.checkpoint_store import SharedStateRegistry
from tidemark.types import CheckpointId


def test_shared_files_are_freed_when_the_last_owner_goes() -> None:
    registry = SharedStateRegistry()
    a, b, c = shared_file("a"), shared_file("b"), shared_file("c")
    registry.register(CheckpointId(1), [a, b, private_file(1)])
    registry.register(CheckpointId(2), [b, c, c])  # a path listed twice counts once
    assert registry.reference_counts() == {a.path: 1, b.path: 2, c.path: 1}
    assert registry.release(CheckpointId(1)) == (a.path,)
    assert registry.reference_count(b.path) == 1
    assert registry.release(CheckpointId(1)) == ()  # releasing twice is harmless
    assert registry.release(CheckpointId(2)) == (b.path, c.path)
    assert registry.reference_counts() == {}
    assert not registry.is_registered(CheckpointId(2))


def test_registering_an_owner_twice_is_refused() -> None:
    registry = SharedStateRegistry()
    registry.register(CheckpointId(1), [shared_file("a")])
    with pytest.raises(ValueError):
        registry.register(CheckpointId(1), [shared_file("a")])
