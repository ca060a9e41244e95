"""Fixtures shared by the state tests: both keyed backends, storage and a manual clock."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable

import pytest

from tidemark.state import (
    HashMapStateBackend,
    KeyedStateBackend,
    KeyGroupRange,
    ManualClock,
    RocksDBOptions,
    RocksDBStateBackend,
)
from tidemark.storage.filesystem import FilesystemCheckpointStorage

BACKENDS = ["heap", "rocksdb"]
BackendFactory = Callable[..., KeyedStateBackend]

_counter = itertools.count()


def make_backend(kind: str, base: Path, key_groups: KeyGroupRange, max_parallelism: int,
                 **kwargs: object) -> KeyedStateBackend:
    if kind == "heap":
        kwargs.pop("options", None)
        return HashMapStateBackend(key_groups, max_parallelism, **kwargs)  # type: ignore[arg-type]
    kwargs.setdefault("options", RocksDBOptions(block_cache_bytes=8 << 20,
                                                write_buffer_total_bytes=8 << 20,
                                                write_buffer_bytes=4 << 20))
    path = base / f"rocks-{next(_counter)}"
    return RocksDBStateBackend(path, key_groups, max_parallelism, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    return FilesystemCheckpointStorage(tmp_path / "checkpoints")


@pytest.fixture
def new_backend(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock):
    """``new_backend(key_groups=..., max_parallelism=..., kind=...)``; closed after the test."""
    created: list[KeyedStateBackend] = []
    default_kind = getattr(request, "param", "heap")

    def factory(key_groups: KeyGroupRange | None = None, max_parallelism: int = 128,
                kind: str | None = None, **kwargs: object) -> KeyedStateBackend:
        kwargs.setdefault("clock", clock)
        backend = make_backend(kind or default_kind, tmp_path,
                               key_groups or KeyGroupRange(0, max_parallelism - 1),
                               max_parallelism, **kwargs)
        created.append(backend)
        return backend

    yield factory
    for backend in created:
        backend.close()


@pytest.fixture
def backend(new_backend):
    return new_backend()
