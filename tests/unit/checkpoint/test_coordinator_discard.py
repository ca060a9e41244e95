"""An operator discards the newest checkpoint (a corrupted one): the coordinator's newest completed
checkpoint drops back to the newest one still retained, so a start that restores it is not refused
as older than a checkpoint that is gone; a checkpoint that left retention or a rejection do not."""

from __future__ import annotations

from dataclasses import replace

import pytest
from checkpoint_support import JOB, ack, records_written, registration

from tidemark.checkpoint import CheckpointCoordinator, CheckpointingOptions, EmitRestore, NewerCheckpointCompleted
from tidemark.checkpoint import RestoreRequest
from tidemark.checkpoint_store.store import DELETED_BY_REQUEST, RETENTION
from tidemark.protocol.messages import CheckpointDiscarded
from tidemark.types import CheckpointId

OPTS = CheckpointingOptions(interval_ms=100, timeout_ms=1_000)


def _three_completed():
    """Checkpoints 1, 2 and 3 completed (each confirmed by the store), then the attempt ended;
    also every record the run left on the coordinator's topics, in order."""
    coord = CheckpointCoordinator(JOB, OPTS)
    reg = registration()
    log: list[object] = []

    def feed(record: object, now: int) -> list:
        log.append(record)
        commands = coord.apply(record, now)
        log.extend(records_written(commands))
        return commands

    feed(reg, 0)
    completed = []
    for cid in (1, 2, 3):
        log.extend(records_written(coord.tick(cid * 100)))
        persist = None
        for task in reg.tasks:
            persist = next(iter(feed(ack(cid, task, cid * 100 + 10), cid * 100 + 10)), persist)
        feed(persist.metadata, cid * 100 + 20)
        completed.append(persist)
    feed(replace(reg, finished=True, outcome="CANCELLED"), 400)
    return coord, completed, log


def _discarded(cid: int, reason: str = DELETED_BY_REQUEST, at: int = 500) -> CheckpointDiscarded:
    return CheckpointDiscarded(JOB, CheckpointId(cid), at, reason)


def _restore_of(persist, newest_seen: int) -> RestoreRequest:
    return RestoreRequest(f"r{persist.metadata.checkpoint_id}", persist.metadata, persist.metadata_path, 2,
                          requested_at=600, newest_seen=newest_seen)


def test_discarding_the_newest_checkpoint_drops_the_newest_completed_back() -> None:
    coord, (_, second, _), _ = _three_completed()
    assert coord.last_completed.checkpoint_id == 3
    with pytest.raises(NewerCheckpointCompleted):  # the defect: 3 is gone, yet 2 was refused forever
        coord.request_restore(_restore_of(second, newest_seen=2), 600)
    coord.apply(_discarded(3), 500)
    assert coord.last_completed.checkpoint_id == 2 and coord.newest_discarded_by_request == 3
    assert isinstance(coord.request_restore(_restore_of(second, newest_seen=2), 600)[0], EmitRestore)


def test_discarding_the_two_newest_drops_back_to_the_third() -> None:
    coord, (first, _, _), _ = _three_completed()
    coord.apply(_discarded(3), 500)
    coord.apply(_discarded(2), 510)
    assert coord.last_completed.checkpoint_id == 1 and coord.newest_discarded_by_request == 3
    assert isinstance(coord.request_restore(_restore_of(first, newest_seen=1), 600)[0], EmitRestore)


def test_discarding_an_older_one_or_retention_keeps_the_newest() -> None:
    coord, _, _ = _three_completed()
    coord.apply(_discarded(1, RETENTION), 500)
    coord.apply(_discarded(2), 510)
    coord.apply(_discarded(9), 520)  # never completed: changes nothing but the record of it
    assert coord.last_completed.checkpoint_id == 3


def test_the_drop_back_is_rebuilt_by_a_replay() -> None:
    """A restarted coordinator folds the same records: the same newest completed checkpoint."""
    coord, _, log = _three_completed()
    coord.apply(_discarded(3), 500)
    fresh = CheckpointCoordinator(JOB, OPTS)
    fresh.replay([*log, _discarded(3)], 700)
    assert fresh.last_completed.checkpoint_id == 2 and fresh.newest_discarded_by_request == 3
