"""One contract suite for every ``CheckpointEventLog``: the in-memory list and ``KafkaEventLog``.

The promises come from ``checkpoint_store/store_event_log.py`` (append-only, ordered; ``append`` returns
only once the events are durable and in order after every event appended before; readers read
the log from the start through their own consumer) and ``persistent_store.py`` (the store's state
is a fold of the log, rebuilt by ``recover`` after a restart).

Each implementation comes with the reader its users read it through: the in-memory log's
``events``; for Kafka, the checkpoint-store's own ``EventLogReader`` from offset 0 over a fresh
single-partition topic on the session broker. The Kafka parametrization carries the
``integration`` marker (tests/conftest.py tiers), so ``pytest -m unit`` runs the in-memory one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from store_support import JOB, metadata, private_file, write_files

from tidemark.checkpoint_store import (
    CheckpointEventLog,
    CheckpointStoreOptions,
    InMemoryCheckpointEventLog,
    PersistentCheckpointStore,
)
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.kafka_event_log import KafkaEventLog
from tidemark.kafka.topics import TopicSpec
from tidemark.protocol import codec
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata
from tidemark.chassis.replay import EventLogReader
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId

IMPLEMENTATIONS = ["in-memory", pytest.param("kafka", marks=pytest.mark.integration)]


@dataclass
class LogUnderTest:
    """A log, a way to open another writer on the same log (a restarted service), and the read
    its users do: everything from the start, in order."""

    log: CheckpointEventLog
    reopen: Callable[[], CheckpointEventLog]
    read_all: Callable[[int], list[Any]]


def _in_memory() -> LogUnderTest:
    log = InMemoryCheckpointEventLog()
    # one process: the list outlives its writer, a "restarted" writer appends to the same list
    return LogUnderTest(log, lambda: log, lambda expected: list(log.events))


def _kafka(request: pytest.FixtureRequest, closers: list[Callable[[], None]]) -> LogUnderTest:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    topic = request.getfixturevalue("unique_name")("checkpoint-events")
    base = {"bootstrap.servers": bootstrap}
    ensure_topics(AdminClient(base), [TopicSpec(topic, 1)])

    def writer() -> KafkaEventLog:
        log = KafkaEventLog(base, topic, timeout_s=15.0)
        closers.append(log.close)
        return log

    def read_all(expected: int) -> list[Any]:
        """The whole topic from offset 0; waits (bounded) for ``expected`` events, then a moment
        longer so that an extra event would show."""
        reader = EventLogReader(base, [topic])
        reader.open()
        events: list[Any] = []
        try:
            deadline = time.monotonic() + 20.0
            quiet_until = None
            while time.monotonic() < deadline:
                events.extend(codec.decode(r.raw.value) for r in reader.poll(timeout_s=0.2))
                if len(events) >= expected and reader.caught_up:
                    quiet_until = quiet_until or time.monotonic() + 0.5
                    if time.monotonic() >= quiet_until:
                        break
        finally:
            reader.close()
        return events

    return LogUnderTest(writer(), writer, read_all)


@pytest.fixture(params=IMPLEMENTATIONS)
def under_test(request: pytest.FixtureRequest) -> Iterator[LogUnderTest]:
    closers: list[Callable[[], None]] = []
    yield _in_memory() if request.param == "in-memory" else _kafka(request, closers)
    for close in closers:
        close()


def _meta(checkpoint_id: int) -> CheckpointMetadata:
    return metadata(checkpoint_id, [private_file(checkpoint_id)])


def _discard(checkpoint_id: int) -> CheckpointDiscarded:
    return CheckpointDiscarded(job_id=JOB, checkpoint_id=CheckpointId(checkpoint_id), discarded_at=1_000 + checkpoint_id,
                               reason="subsumed", released_files=(f"job/chk-{checkpoint_id}/_metadata",))


def test_implements_the_port(under_test: LogUnderTest) -> None:
    assert isinstance(under_test.log, CheckpointEventLog)


def test_appends_read_back_in_order_and_unchanged(under_test: LogUnderTest) -> None:
    batches = [[_meta(1)], [_meta(2), _discard(1)], [_meta(3), _discard(2), _meta(4)]]
    for batch in batches:
        under_test.log.append(batch)
    expected = [event for batch in batches for event in batch]
    # no close/flush before reading: append itself returned only once the events were durable
    assert under_test.read_all(len(expected)) == expected


def test_an_empty_append_adds_nothing(under_test: LogUnderTest) -> None:
    under_test.log.append([])
    under_test.log.append([_meta(1)])
    under_test.log.append([])
    assert under_test.read_all(1) == [_meta(1)]


def test_the_log_does_not_deduplicate(under_test: LogUnderTest) -> None:
    """Append-only: the same event appended twice (the store re-publishing a confirmation) is in
    the log twice; idempotence is the fold's job, not the log's."""
    under_test.log.append([_meta(1)])
    under_test.log.append([_meta(1)])
    assert under_test.read_all(2) == [_meta(1), _meta(1)]


def test_a_restarted_writer_appends_after_everything_before(under_test: LogUnderTest) -> None:
    under_test.log.append([_meta(1), _meta(2)])
    again = under_test.reopen()
    again.append([_discard(1), _meta(3)])
    assert under_test.read_all(4) == [_meta(1), _meta(2), _discard(1), _meta(3)]


def test_a_store_rebuilt_from_the_log_equals_the_store_that_wrote_it(under_test: LogUnderTest,
                                                                      tmp_path: Path) -> None:
    """The store's state is a fold of this log: a restarted checkpoint-store that replays what
    the first one appended retains the same checkpoints and owes no discard."""
    storage = FilesystemCheckpointStorage(tmp_path / "checkpoints")
    options = CheckpointStoreOptions(retained_checkpoints=2)
    first = PersistentCheckpointStore(JOB, storage, under_test.log, options)
    for cid in (1, 2, 3, 4):
        first.store_checkpoint(metadata(cid, write_files(storage, [private_file(cid)])), 100 * cid)
    first.store_checkpoint(first.store.get(CheckpointId(4)), 500)  # re-published confirmation
    appended = 4 + 2 + 1  # four confirmations, two discards (1 and 2 left retention), one again

    events = under_test.read_all(appended)
    assert len(events) == appended
    rebuilt = PersistentCheckpointStore(JOB, storage, under_test.reopen(), options)
    assert rebuilt.recover(events, 600) == ()  # nothing left to delete, nothing owed
    assert rebuilt.store.retained() == first.store.retained()
    assert [m.checkpoint_id for m in rebuilt.store.retained()] == [3, 4]
    assert under_test.read_all(appended) == events  # recovery appended nothing
