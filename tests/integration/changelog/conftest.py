"""Fixtures for the changelog tests: a changelog topic on the real broker, writers, backends."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from closing_factory import closing_factory
from tidemark.changelog import (
    ChangelogReader,
    ChangelogReaderOptions,
    ChangelogWriter,
    ChangelogWriterOptions,
    changelog_topic,
)
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicNames
from tidemark.state import HashMapStateBackend, KeyedStateBackend, KeyGroupRange, RocksDBOptions
from tidemark.state import RocksDBStateBackend
from tidemark.changelog.backend import ChangelogStateBackend
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import Epoch, JobId, TaskId

MAX_P = 128
SMALL_ROCKS = RocksDBOptions(block_cache_bytes=4 << 20, write_buffer_total_bytes=4 << 20,
                             write_buffer_bytes=1 << 20)
_counter = itertools.count()


@pytest.fixture
def client(kafka_bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": kafka_bootstrap}


@pytest.fixture
def make_topic(client: dict[str, Any], unique_name: Callable[[str], str]) -> Callable[[int], str]:
    """``make_topic(partitions)`` -> the name of a fresh changelog topic."""
    admin = AdminClient(client)

    def make(partitions: int) -> str:
        spec = changelog_topic(TopicNames(unique_name("tm")), "job", f"op{next(_counter)}", partitions)
        ensure_topics(admin, [spec])
        return spec.name

    return make


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemCheckpointStorage:
    return FilesystemCheckpointStorage(tmp_path / "checkpoints")


@pytest.fixture
def make_writer(client: dict[str, Any]) -> Iterator[Callable[..., ChangelogWriter]]:
    def make(topic: str, partitions: int, task: str = "op#0", epoch: int = 0,
             **options: Any) -> ChangelogWriter:
        return ChangelogWriter(client, topic, partitions=partitions, max_parallelism=MAX_P,
                               job_id=JobId("job"), task_id=TaskId(task), epoch=Epoch(epoch),
                               options=ChangelogWriterOptions(**options))

    yield from closing_factory(make)


@pytest.fixture
def make_reader(client: dict[str, Any]) -> Callable[[int], ChangelogReader]:
    def make(partitions: int, idle_timeout_s: float = 10.0) -> ChangelogReader:
        return ChangelogReader(client, partitions=partitions, max_parallelism=MAX_P,
                               options=ChangelogReaderOptions(idle_timeout_s=idle_timeout_s))

    return make


@pytest.fixture
def make_backend(tmp_path: Path) -> Iterator[Callable[[str, KeyGroupRange], KeyedStateBackend]]:
    def make(kind: str, key_groups: KeyGroupRange) -> KeyedStateBackend:
        if kind == "heap":
            return HashMapStateBackend(key_groups, MAX_P)
        return RocksDBStateBackend(tmp_path / f"rocks-{next(_counter)}", key_groups, MAX_P, options=SMALL_ROCKS)

    yield from closing_factory(make)


@pytest.fixture
def make_changelog_backend(make_backend: Any, make_writer: Any, make_reader: Any) -> Callable[..., ChangelogStateBackend]:
    """``make_changelog_backend(kind, key_groups, topic, partitions, task=..., epoch=...,
    rebase_to=...)``; a restore reads the ranges with a reader of ``partitions``."""

    def make(kind: str, key_groups: KeyGroupRange, topic: str, partitions: int, *,
             task: str = "op#0", epoch: int = 0, rebase_to: CheckpointStorage | None = None) -> ChangelogStateBackend:
        return ChangelogStateBackend(make_backend(kind, key_groups),
                                     make_writer(topic, partitions, task=task, epoch=epoch),
                                     make_reader(partitions), rebase_to)

    return make
