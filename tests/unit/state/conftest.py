"""Fixtures shared by the state tests: the three keyed backends, storage and a manual clock.

``"changelog"`` is the changelog backend over a heap backend, built through the state registry
with an in-memory changelog (a writer that subclasses the real abstract writer, and the real
reader over the same records); a restore that must rebase writes into the test's storage.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Callable

import pytest

from closing_factory import closing_factory
from tidemark.state import (
    BackendContext,
    KeyedSnapshot,
    KeyedStateBackend,
    KeyGroupRange,
    ManualClock,
    RocksDBOptions,
    RocksDBStateBackend,
    create_backend,
)
from tidemark.changelog.backend import ChangelogWiring
from tidemark.materializer.storage import SharedFilesView
from tidemark.state.rocksdb.capture import Capture
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.testing.changelog import (
    InMemoryChangelogReader,
    InMemoryChangelogTopic,
    InMemoryChangelogWriter,
)

BACKENDS = ["heap", "rocksdb", "changelog"]
BackendFactory = Callable[..., KeyedStateBackend]

_counter = itertools.count()


def make_backend(kind: str, base: Path, key_groups: KeyGroupRange, max_parallelism: int,
                 changelog: InMemoryChangelogTopic | None = None, storage: CheckpointStorage | None = None,
                 **kwargs: object) -> KeyedStateBackend:
    options = kwargs.pop("options", None)
    if kind == "rocksdb":
        options = options or RocksDBOptions(block_cache_bytes=8 << 20, write_buffer_total_bytes=8 << 20,
                                            write_buffer_bytes=4 << 20)
        path = base / f"rocks-{next(_counter)}"
        return RocksDBStateBackend(path, key_groups, max_parallelism, options=options, **kwargs)  # type: ignore[arg-type]
    context = BackendContext(key_groups, max_parallelism, **kwargs)  # type: ignore[arg-type]
    if kind == "heap":
        return create_backend("heap", context)
    assert kind == "changelog" and changelog is not None
    attempt = next(_counter)  # every backend is a new writer (task attempt) on the shared topic
    writer = InMemoryChangelogWriter(changelog, max_parallelism=max_parallelism,
                                     task_id=f"{context.operator_id}#{key_groups.start}", epoch=attempt)
    reader = InMemoryChangelogReader(changelog, max_parallelism=max_parallelism)
    rebase_to = None if storage is None else SharedFilesView(storage, f"rebased/{writer.task_id}", f"e{attempt}")
    return create_backend("heap", context, ChangelogWiring(writer, reader, rebase_to))


def snapshots_for(snapshots: list[KeyedSnapshot], key_groups: KeyGroupRange) -> list[KeyedSnapshot]:
    """The snapshots a backend owning ``key_groups`` restores from (as the stage restore picks)."""
    return [s for s in snapshots if len(s.key_groups.intersection(key_groups))]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000)


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    return FilesystemCheckpointStorage(tmp_path / "checkpoints")


@pytest.fixture
def changelog_topic() -> InMemoryChangelogTopic:
    return InMemoryChangelogTopic("tidemark.test.changelog", partitions=4)


@pytest.fixture
def new_backend(request: pytest.FixtureRequest, tmp_path: Path, clock: ManualClock,
                changelog_topic: InMemoryChangelogTopic, storage: FilesystemCheckpointStorage):
    """``new_backend(key_groups=..., max_parallelism=..., kind=...)``; closed after the test."""
    default_kind = getattr(request, "param", "heap")

    def factory(key_groups: KeyGroupRange | None = None, max_parallelism: int = 128,
                kind: str | None = None, **kwargs: object) -> KeyedStateBackend:
        kwargs.setdefault("clock", clock)
        return make_backend(kind or default_kind, tmp_path, key_groups or KeyGroupRange(0, max_parallelism - 1),
                            max_parallelism, changelog_topic, storage, **kwargs)

    yield from closing_factory(factory)


@pytest.fixture
def backend(new_backend):
    return new_backend()


@pytest.fixture
def capture_held(monkeypatch: pytest.MonkeyPatch):
    """RocksDB's capture thread waits until the test lets it go: every change the test makes
    first lands in the live database before the checkpoint is taken (the capture must undo them
    in the checkpoint's copy); other backends capture at once and have no such thread."""
    gate, run = threading.Event(), Capture._run
    monkeypatch.setattr(Capture, "_run", lambda self: (gate.wait(60), run(self)))
    yield gate
    gate.set()
