"""Response documents rendered from the real stats tracker, and their text form in the CLI."""

from __future__ import annotations

import json

import pytest

from tidemark.checkpoint import CheckpointStatsTracker
from tidemark.admin import render
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.admin.documents import history_document, metadata_document
from tidemark.protocol.messages import CheckpointMetadata, TaskSnapshot, TaskTimings
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId, KeyGroup, OperatorId, TaskId

JOB = JobId("orders")
TASKS = (TaskId("counts#0"), TaskId("counts#1"))


def metadata(cid: int, triggered: int, completed: int, sizes: tuple[int, int]) -> CheckpointMetadata:
    tasks = tuple(TaskSnapshot(t, OperatorId("counts"), i, KeyGroup(64 * i), KeyGroup(64 * i + 63))
                  for i, t in enumerate(TASKS))
    return CheckpointMetadata(job_id=JOB, checkpoint_id=CheckpointId(cid),
                              checkpoint_type=CheckpointType.CHECKPOINT, triggered_at=triggered,
                              completed_at=completed, max_parallelism=128, tasks=tasks, epoch=Epoch(1),
                              state_size_bytes=sizes[1], checkpointed_size_bytes=sizes[0])


@pytest.fixture
def tracker() -> CheckpointStatsTracker:
    stats = CheckpointStatsTracker(history_size=10)
    stats.report_triggered(CheckpointId(1), CheckpointType.CHECKPOINT, 1_700_000_000_000, 2)
    for task in TASKS:
        stats.report_task_ack(CheckpointId(1), task, TaskTimings(sync_ms=3, async_ms=40))
    stats.report_completed(metadata(1, 1_700_000_000_000, 1_700_000_000_750, (2048, 5 * 1024 * 1024)),
                           1_700_000_001_250, "orders/chk-1/_metadata")
    stats.report_triggered(CheckpointId(2), CheckpointType.SAVEPOINT, 1_700_000_005_000, 2)
    stats.report_failed(CheckpointId(2), CheckpointType.SAVEPOINT, 1_700_000_005_000, 1_700_000_065_000,
                        "TIMEOUT: not acknowledged within 60000 ms")
    stats.report_triggered(CheckpointId(3), CheckpointType.CHECKPOINT, 1_700_000_070_000, 2)
    return stats


def test_history_document_has_durations_sizes_and_failures(tracker: CheckpointStatsTracker) -> None:
    document = history_document(JOB, tracker.snapshot())
    json.dumps(document)  # plain JSON data
    assert document["counts"] == {"triggered": 3, "in_progress": 1, "completed": 1, "failed": 1, "restored": 0}
    third, second, first = document["checkpoints"]
    assert first == {
        "id": 1, "type": "CHECKPOINT", "status": "COMPLETED", "triggered_at": 1_700_000_000_000,
        "ended_at": 1_700_000_001_250, "duration_ms": 1250, "checkpointed_size_bytes": 2048,
        "full_size_bytes": 5 * 1024 * 1024, "num_tasks": 2, "num_acknowledged": 2, "alignment_ms": 0,
        "failure_reason": None, "metadata_path": "orders/chk-1/_metadata",
    }
    assert (second["status"], second["type"], second["duration_ms"]) == ("FAILED", "SAVEPOINT", 60_000)
    assert second["failure_reason"].startswith("TIMEOUT")
    assert (third["status"], third["duration_ms"], third["ended_at"]) == ("IN_PROGRESS", None, None)


def test_history_text_is_a_table_with_human_units(tracker: CheckpointStatsTracker) -> None:
    text = render.history_text(history_document(JOB, tracker.snapshot()))
    lines = text.splitlines()
    assert lines[0] == "job orders: 1 completed, 1 failed, 1 in progress, 0 restores"
    assert lines[1].split()[:5] == ["ID", "TYPE", "STATUS", "TRIGGERED", "DURATION"]
    header = lines[1]
    assert all(line.startswith(("1 ", "2 ", "3 ")) for line in lines[2:])
    completed = lines[4]
    assert completed[header.index("DURATION"):].startswith("1.25 s")
    assert completed[header.index("CHECKPOINTED"):].startswith("2.0 KiB")
    assert completed[header.index("FULL SIZE"):].startswith("5.0 MiB")
    assert "2023-11-14 22:13:20.000Z" in completed and "2/2" in completed
    assert lines[3][header.index("DURATION"):].startswith("1m00s")
    assert lines[3].rstrip().endswith("TIMEOUT: not acknowledged within 60000 ms")


def test_retained_text_lists_paths_and_unreadable_files() -> None:
    meta = metadata(4, 1_000, 1_480, (10, 3000))
    document = {"job": JOB, "savepoints": [metadata_document("orders/savepoints/sp-4/_metadata", meta)],
                "unreadable": ["orders/savepoints/sp-2/_metadata"]}
    assert document["savepoints"][0]["duration_ms"] == 480
    text = render.retained_text(document, "savepoints")
    assert text.splitlines()[0] == "job orders: 1 retained savepoints"
    assert "orders/savepoints/sp-4/_metadata" in text and "480 ms" in text and "2.9 KiB" in text
    assert text.splitlines()[-1] == "unreadable metadata: orders/savepoints/sp-2/_metadata"


@pytest.mark.parametrize("size, text", [(None, "-"), (0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                        (1536, "1.5 KiB"), (1280, "1.3 KiB"), (3 * 1024 ** 3, "3.0 GiB"),
                                        (2 * 1024 ** 5, "2048.0 TiB")])
def test_format_bytes(size: int | None, text: str) -> None:
    assert render.format_bytes(size) == text


@pytest.mark.parametrize("ms, text", [(None, "-"), (0, "0 ms"), (999, "999 ms"), (1000, "1.00 s"),
                                      (26_625, "26.63 s"), (26_624, "26.62 s"),
                                      (59_999, "60.00 s"), (60_000, "1m00s"), (3_725_000, "62m05s")])
def test_format_duration(ms: int | None, text: str) -> None:
    assert render.format_duration(ms) == text


def test_table_pads_columns_and_shows_missing_cells() -> None:
    assert render.table(("A", "LONGER"), [(1, None), ("wide-cell", "x")]).splitlines() == [
        "A          LONGER", "1          -", "wide-cell  x"]


def test_client_refuses_bad_urls_and_reports_unreachable_coordinators() -> None:
    for url in ("127.0.0.1:9400", "ftp://host/", "http://"):
        with pytest.raises(ValueError, match="http"):
            CoordinatorClient(url)
    client = CoordinatorClient("http://127.0.0.1:9/", "token", timeout_s=2)
    with pytest.raises(ApiError) as caught:
        client.jobs()
    assert caught.value.status is None and "cannot reach the coordinator at http://127.0.0.1:9" in str(caught.value)


def test_client_error_messages_prefer_the_servers_json_error() -> None:
    assert CoordinatorClient._error_message(404, b'{"error": "unknown job \'x\'", "status": 404}') == "unknown job 'x'"
    assert CoordinatorClient._error_message(405, b"405: Method Not Allowed") == "405: Method Not Allowed"
    assert CoordinatorClient._error_message(502, b"") == "HTTP 502"
    assert str(ApiError(401, "invalid bearer token")) == "HTTP 401: invalid bearer token"
