"""The two-phase-commit output's per-task decisions (tidemark.runtime.worker.outputs): which markers a
commit writes, and which restored buffers a recovery still commits, when a stage's tasks are
spread over worker processes that commit independently."""

from __future__ import annotations

from tidemark.kafka.commit_markers import CommitMarker, MarkerScan, SlotCommits
from tidemark.runtime.worker.outputs import PendingBuffer, task_commit_markers, uncommitted_buffers
from tidemark.types import CheckpointId, TaskId

QUERY = "job/sink"


def buffer(task: str, checkpoint: int, records: int = 2) -> PendingBuffer:
    return PendingBuffer(TaskId(task), CheckpointId(checkpoint),
                         tuple((None, f"{task}/{checkpoint}/{i}".encode()) for i in range(records)))


def commits_of(*windows: list[CommitMarker], at_most: int, slots: set[int]) -> SlotCommits:
    """What the lookup returns for these marker windows (newest first), as newest_commits folds them."""
    scan = MarkerScan(QUERY, frozenset(slots), at_most, need_whole_commit=True)
    for window in windows:
        scan.fold((m.key, m.encode()) for m in window)
    return SlotCommits(scan.newest, scan.whole_commit)


def test_a_commit_writes_one_marker_per_task_in_the_tasks_slot() -> None:
    due = [buffer("sink#2", 1, 3), buffer("sink#0", 1, 1), buffer("sink#2", 2, 4)]
    markers = task_commit_markers(QUERY, CheckpointId(2), due, "txn-w1", 42)
    assert markers == [CommitMarker(QUERY, 2, 0, "txn-w1", 1, 42, task="sink#0"),
                       CommitMarker(QUERY, 2, 2, "txn-w1", 7, 42, task="sink#2")]
    assert [m.key for m in markers] == [b"job/sink/0", b"job/sink/2"]


def test_another_workers_commit_of_the_same_checkpoint_does_not_cover_my_tasks() -> None:
    # worker 0 (task 0) committed checkpoint 1; worker 1 (task 1) died before it did
    worker0 = task_commit_markers(QUERY, CheckpointId(1), [buffer("sink#0", 1)], "txn-w0", 1)
    commits = commits_of(worker0, at_most=1, slots={1})
    restored = [buffer("sink#1", 1)]
    assert uncommitted_buffers(restored, commits) == restored
    commits = commits_of(worker0, at_most=1, slots={0})
    assert uncommitted_buffers([buffer("sink#0", 1)], commits) == []


def test_each_buffer_is_decided_by_its_own_tasks_slot_and_the_restored_checkpoint() -> None:
    first = task_commit_markers(QUERY, CheckpointId(1), [buffer("sink#0", 1), buffer("sink#1", 1)], "txn-w0", 1)
    second = task_commit_markers(QUERY, CheckpointId(2), [buffer("sink#0", 2)], "txn-w0", 2)
    third = task_commit_markers(QUERY, CheckpointId(3), [buffer("sink#0", 3), buffer("sink#1", 3)], "txn-w0", 3)
    # restoring checkpoint 2: markers of checkpoint 3 do not count (at_most), the newest window first
    commits = commits_of(third, first + second, at_most=2, slots={0, 1})
    restored = [buffer("sink#1", 2), buffer("sink#0", 2), buffer("sink#1", 1)]
    assert uncommitted_buffers(restored, commits) == [buffer("sink#1", 2)]


def test_buffers_of_tasks_from_before_a_rescale_are_decided_by_their_old_slot() -> None:
    committed = task_commit_markers(QUERY, CheckpointId(4), [buffer("sink#3", 4)], "txn-w1", 1)
    commits = commits_of(committed, at_most=4, slots={2, 3})
    assert uncommitted_buffers([buffer("sink#3", 4), buffer("sink#2", 4)], commits) == [buffer("sink#2", 4)]


def test_a_commit_written_before_markers_were_per_task_still_counts_for_every_task() -> None:
    old = [CommitMarker(QUERY, 5, 0, "txn", 8, 5, task=None)]
    commits = commits_of(old, at_most=6, slots={0, 1, 2})
    restored = [buffer("sink#0", 5), buffer("sink#1", 5), buffer("sink#2", 6)]
    assert uncommitted_buffers(restored, commits) == [buffer("sink#2", 6)]
    # after the upgrade, task 0 alone committed checkpoint 6: tasks 1 and 2 still have the old one
    newer = task_commit_markers(QUERY, CheckpointId(6), [buffer("sink#0", 6)], "txn-w0", 6)
    commits = commits_of(newer, old, at_most=6, slots={0, 1, 2})
    assert commits.committed_up_to(0) == 6 and commits.committed_up_to(1) == 5
    assert uncommitted_buffers([buffer("sink#1", 5), buffer("sink#2", 6)], commits) == [buffer("sink#2", 6)]


def test_uncommitted_buffers_come_in_commit_order() -> None:
    restored = [buffer("sink#1", 2), buffer("sink#0", 2), buffer("sink#1", 1)]
    assert uncommitted_buffers(restored, SlotCommits({})) == [buffer("sink#1", 1), buffer("sink#0", 2),
                                                             buffer("sink#1", 2)]
