"""The state registry: backends by name, the changelog wrapper by its wiring, readers by handle kind."""

from __future__ import annotations

import pytest

from tidemark.protocol.messages import StateHandleKind
from tidemark.state import (
    BackendContext,
    HashMapStateBackend,
    KeyGroupRange,
    RocksDBStateBackend,
    create_backend,
)
from tidemark.changelog.backend import ChangelogStateBackend, ChangelogWiring
from tidemark.state.backend_registry import UnknownBackendError, backend_names, handle_reader
from tidemark.state.restore import read_canonical
from tidemark.state.rocksdb.snapshot import read_incremental
from tidemark.testing.changelog import InMemoryChangelogTopic, InMemoryChangelogWriter

ALL = KeyGroupRange(0, 127)


def test_backends_are_created_by_name(tmp_path) -> None:
    assert {"heap", "rocksdb"} <= set(backend_names())
    with create_backend("heap", BackendContext(ALL, 128, "op")) as heap:
        assert isinstance(heap, HashMapStateBackend) and heap.operator_id == "op"
    with create_backend("rocksdb", BackendContext(ALL, 128, "op", tmp_path / "rocks")) as rocks:
        assert isinstance(rocks, RocksDBStateBackend) and rocks.key_group_range == ALL
    with pytest.raises(ValueError, match="local directory"):
        create_backend("rocksdb", BackendContext(ALL, 128))
    with pytest.raises(UnknownBackendError, match="'memory'"):
        create_backend("memory", BackendContext(ALL, 128))


def test_a_changelog_wiring_wraps_the_named_backend() -> None:
    writer = InMemoryChangelogWriter(InMemoryChangelogTopic("t", 2), max_parallelism=128)
    with create_backend("heap", BackendContext(ALL, 128), ChangelogWiring(writer)) as backend:
        assert isinstance(backend, ChangelogStateBackend)
        assert isinstance(backend.backend, HashMapStateBackend) and backend.writer is writer
    with pytest.raises(UnknownBackendError, match="str"):
        create_backend("heap", BackendContext(ALL, 128), "not a wiring")


def test_every_keyed_handle_kind_has_a_reader() -> None:
    assert handle_reader(StateHandleKind.KEYED_FULL) is read_canonical
    assert handle_reader(StateHandleKind.MATERIALIZED) is read_canonical
    assert handle_reader(StateHandleKind.KEYED_INCREMENTAL) is read_incremental
    with pytest.raises(UnknownBackendError):
        handle_reader(StateHandleKind.OPERATOR)
