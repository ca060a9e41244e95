"""Retention of the newest N checkpoints and of every savepoint, and the event-log fold."""

from __future__ import annotations

import pytest
from store_support import JOB, metadata, private_file, shared_file

from tidemark.checkpoint_store import CheckpointStoreOptions, CompletedCheckpointStore
from tidemark.protocol.messages import CheckpointDiscarded, StateFile
from tidemark.types import CheckpointId, CheckpointType, JobId

SAVEPOINT = CheckpointType.SAVEPOINT


def store(n: int = 2) -> CompletedCheckpointStore:
    return CompletedCheckpointStore(JOB, CheckpointStoreOptions(retained_checkpoints=n))


def test_retention_keeps_exactly_n_checkpoints_and_every_savepoint() -> None:
    s = store(2)
    assert s.add(metadata(1, [private_file(1)])) == ()
    assert s.add(metadata(2, [private_file(2)], SAVEPOINT)) == ()
    assert s.add(metadata(3, [private_file(3)])) == ()
    (discard,) = s.add(metadata(4, [private_file(4)]))
    assert discard.checkpoint_id == 1 and discard.reason == "retention"
    assert discard.deleted_files == ("job/chk-1/_metadata", private_file(1).path)
    assert [m.checkpoint_id for m in s.checkpoints()] == [3, 4]
    assert [m.checkpoint_id for m in s.savepoints()] == [2]
    for i in range(5, 9):
        s.add(metadata(i, [private_file(i)]))
    assert [m.checkpoint_id for m in s.retained()] == [2, 7, 8]
    assert s.latest() is not None and s.latest().checkpoint_id == 8


def test_shared_files_are_deleted_only_when_unreferenced() -> None:
    s = store(1)
    s.add(metadata(1, [private_file(1), shared_file("a"), shared_file("b")]))
    s.add(metadata(2, [private_file(2), shared_file("b")], SAVEPOINT))
    (d,) = s.add(metadata(3, [private_file(3), shared_file("c")]))
    assert d.deleted_files == ("job/chk-1/_metadata", private_file(1).path, shared_file("a").path)
    assert s.registry.reference_count(shared_file("b").path) == 1
    discard = s.delete_savepoint(CheckpointId(2))
    assert discard is not None and discard.reason == "deleted by request"
    assert discard.deleted_files == ("job/savepoints/sp-2/_metadata", private_file(2).path,
                                     shared_file("b").path)
    assert s.delete_savepoint(CheckpointId(2)) is None
    with pytest.raises(ValueError):
        s.delete_savepoint(CheckpointId(3))  # checkpoints only leave by retention


def test_adding_twice_or_after_discard_is_a_no_op() -> None:
    s = store(1)
    s.add(metadata(1, [private_file(1)]))
    s.add(metadata(2, [private_file(2)]))
    assert s.add(metadata(2, [private_file(2)])) == ()
    assert s.add(metadata(1, [private_file(1)])) == ()  # discarded already: never resurrected
    assert [m.checkpoint_id for m in s.retained()] == [2]


def test_an_older_checkpoint_added_late_is_discarded_at_once() -> None:
    s = store(1)
    s.add(metadata(5, [private_file(5)]))
    (d,) = s.add(metadata(4, [private_file(4)]))
    assert d.checkpoint_id == 4
    assert [m.checkpoint_id for m in s.retained()] == [5]


def test_conflicting_file_claims_are_refused() -> None:
    s = store(3)
    s.add(metadata(1, [private_file(1), shared_file("a")]))
    with pytest.raises(ValueError):
        s.add(metadata(2, [private_file(1)]))  # another checkpoint's private file
    with pytest.raises(ValueError):
        s.add(metadata(3, [StateFile(shared_file("a").path, 3, "0" * 64, shared=False)]))
    with pytest.raises(ValueError):
        s.add(metadata(4, [], job=JobId("other")))
    assert [m.checkpoint_id for m in s.retained()] == [1]


def test_fold_of_the_event_log_rebuilds_the_same_store() -> None:
    live = store(2)
    log: list[object] = []
    ops = [
        metadata(1, [private_file(1), shared_file("a")]),
        metadata(2, [private_file(2), shared_file("a"), shared_file("b")], SAVEPOINT),
        metadata(3, [private_file(3), shared_file("b")]),
        metadata(4, [private_file(4), shared_file("c")]),
        metadata(5, [private_file(5), shared_file("c"), shared_file("a")]),
    ]
    for m in ops:
        log.append(m)
        log.extend(d.to_event(JOB, 0) for d in live.add(m))
    d = live.delete_savepoint(CheckpointId(2))
    assert d is not None
    log.append(d.to_event(JOB, 0))
    rebuilt = store(2)
    for event in log:
        rebuilt.fold(event)  # type: ignore[arg-type]
    assert rebuilt.retained() == live.retained()
    assert rebuilt.registry.reference_counts() == live.registry.reference_counts()
    other_job = CheckpointDiscarded(JobId("other"), CheckpointId(4), 0, "retention")
    assert rebuilt.fold(other_job) == ()
