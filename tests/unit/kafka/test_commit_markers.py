"""tidemark.kafka.commit_markers, the pure parts: the marker's encoding (markers without a task
are byte-compatible with the ones written before markers had one), the backward scan's fold
(:class:`MarkerScan`) and what a slot counts as committed up to (:class:`SlotCommits`)."""

from __future__ import annotations

import json

from tidemark.kafka.commit_markers import CommitMarker, MarkerScan, SlotCommits

QUERY = "job/sink"


def marker(batch: int, slot: int, task: str | None = "default", query: str = QUERY) -> CommitMarker:
    owner = f"sink#{slot}" if task == "default" else task
    return CommitMarker(query, batch, slot, "txn-w0", 3, 1_000 * batch, task=owner)


def whole(batch: int) -> CommitMarker:
    """A marker as the two-phase-commit output wrote it before markers were per task."""
    return marker(batch, 0, task=None)


def record(m: CommitMarker) -> tuple[bytes, bytes]:
    return m.key, m.encode()


def test_a_marker_without_a_task_encodes_as_markers_always_did_and_decodes_back() -> None:
    old_json = (b'{"batch_id": 7, "partition": 0, "query_id": "job/sink", "records": 3, '
                b'"transactional_id": "txn-w0", "written_at": 7000}')
    assert whole(7).encode() == old_json
    assert CommitMarker.decode(old_json) == whole(7)
    assert whole(7).covers_every_task

    per_task = marker(7, 2)
    assert json.loads(per_task.encode())["task"] == "sink#2"
    assert CommitMarker.decode(per_task.encode()) == per_task
    assert per_task.key == b"job/sink/2"
    assert not per_task.covers_every_task and not marker(7, 0).covers_every_task


def test_each_slot_gets_its_last_marker_not_after_at_most_from_the_newest_window_holding_one() -> None:
    scan = MarkerScan(QUERY, frozenset({0, 1, 2}), at_most=5)
    scan.fold(map(record, [marker(4, 0), marker(5, 0), marker(6, 0), marker(6, 1)]))  # newest window
    assert scan.newest == {0: marker(5, 0)} and not scan.done
    scan.fold(map(record, [marker(2, 1), marker(3, 1), marker(1, 0), marker(2, 2)]))  # the one before
    assert scan.newest == {0: marker(5, 0), 1: marker(3, 1), 2: marker(2, 2)}
    assert scan.done


def test_other_queries_keys_and_records_without_value_are_skipped() -> None:
    scan = MarkerScan(QUERY, frozenset({0}), at_most=9)
    other_query = marker(8, 0, query="job/sink2")
    nested_query = marker(8, 0, query="job/sink/x")
    scan.fold([record(other_query), record(nested_query), (b"job/sink/0", None), (None, b"{}")])
    assert scan.newest == {} and not scan.done
    scan.fold([record(marker(1, 0))])
    assert scan.newest == {0: marker(1, 0)}


def test_slots_not_asked_for_are_kept_when_met() -> None:
    scan = MarkerScan(QUERY, frozenset({0}), at_most=9)
    scan.fold(map(record, [marker(3, 5), marker(3, 0)]))
    assert scan.done and scan.newest == {0: marker(3, 0), 5: marker(3, 5)}


def test_the_whole_commit_marker_is_searched_past_the_per_task_markers_of_slot_0() -> None:
    scan = MarkerScan(QUERY, frozenset(), at_most=9, need_whole_commit=True)
    scan.fold(map(record, [marker(4, 0), marker(4, 1)]))
    assert scan.whole_commit is None and not scan.done
    scan.fold(map(record, [whole(2), whole(3), marker(1, 1)]))
    assert scan.whole_commit == whole(3) and scan.done
    assert scan.newest == {0: marker(4, 0), 1: marker(4, 1)}  # slot 0's own newest is the per-task one


def test_a_slot_is_committed_up_to_its_own_newest_marker() -> None:
    commits = SlotCommits({0: marker(5, 0), 1: marker(3, 1)}, whole_commit=whole(4))
    assert commits.committed_up_to(0) == 5
    assert commits.committed_up_to(1) == 3  # its own marker decides, not the older whole commit
    assert commits.newest_batch == 5


def test_a_slot_without_a_marker_counts_the_whole_commit_marker_or_nothing() -> None:
    assert SlotCommits({0: marker(5, 0)}, whole_commit=whole(4)).committed_up_to(2) == 4
    assert SlotCommits({0: marker(5, 0)}).committed_up_to(2) == 0
    assert SlotCommits({}).newest_batch == 0
    assert SlotCommits({}, whole_commit=whole(4)).newest_batch == 4
