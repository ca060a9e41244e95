"""The checkpoints page's pieces without a browser: the per-checkpoint document it shows acks from,
the alignment column of the history, and the page file with its Content-Security-Policy.
(The page running in Chromium against a live job: tests/e2e/test_checkpoints_page.py.)"""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest

from tidemark.checkpoint import CheckpointStatsTracker
from tidemark.admin.documents import checkpoint_detail_document, history_document
from tidemark.admin.request_bodies import BadRequest, parse_checkpoint_id
from tidemark.protocol.messages import TaskTimings
from tidemark.services.coordinator.checkpoints_page import content_security_policy, page
from tidemark.types import CheckpointId, CheckpointType, JobId, TaskId

JOB = JobId("orders")


def tracker_with_two_of_three_acks() -> CheckpointStatsTracker:
    stats = CheckpointStatsTracker()
    stats.report_triggered(CheckpointId(7), CheckpointType.CHECKPOINT, 1_000, 3)
    stats.report_task_ack(CheckpointId(7), TaskId("top#1"), TaskTimings(alignment_ms=250, sync_ms=4, async_ms=90,
                                                                         processed_bytes=4096))
    stats.report_task_ack(CheckpointId(7), TaskId("count#0"), TaskTimings(alignment_ms=15, sync_ms=2, async_ms=30))
    stats.report_triggered(CheckpointId(8), CheckpointType.CHECKPOINT, 3_000, 3)
    return stats


def test_the_detail_lists_the_acks_by_task_with_their_timings() -> None:
    entry = tracker_with_two_of_three_acks().snapshot().history[0]
    document = checkpoint_detail_document(JOB, entry)
    json.dumps(document)
    assert document["job"] == JOB
    assert document["checkpoint"]["id"] == 7 and document["checkpoint"]["num_acknowledged"] == 2
    assert document["acks"] == [
        {"task_id": "count#0", "alignment_ms": 15, "sync_ms": 2, "async_ms": 30, "processed_bytes": 0},
        {"task_id": "top#1", "alignment_ms": 250, "sync_ms": 4, "async_ms": 90, "processed_bytes": 4096},
    ]


def test_the_history_shows_the_longest_alignment_and_none_before_any_ack() -> None:
    newest, oldest = history_document(JOB, tracker_with_two_of_three_acks().snapshot())["checkpoints"]
    assert oldest["alignment_ms"] == 250
    assert newest["alignment_ms"] is None


@pytest.mark.parametrize("raw", ["0", "-1", "abc", "1.5", "", "١", "9" * 20])
def test_checkpoint_ids_in_urls_are_positive_decimals(raw: str) -> None:
    with pytest.raises(BadRequest):
        parse_checkpoint_id(raw)
    assert parse_checkpoint_id("42") == 42


def test_the_page_is_self_contained() -> None:
    html, headers = page()
    assert re.search(r"""(src|href)=["']?(https?:)?//""", html) is None  # nothing from another origin
    assert "import " not in html and "innerHTML" not in html  # no modules; data only as text
    assert len(re.findall(r"<script>", html)) == 1 and len(re.findall(r"<style>", html)) == 1
    assert headers["Content-Security-Policy"] == content_security_policy(html)
    assert headers["Cache-Control"] == "no-store" and headers["Referrer-Policy"] == "no-referrer"


def test_the_policy_allows_exactly_the_inline_blocks_by_hash() -> None:
    html = "<style>b{}</style><p>x</p><script>go()</script>"
    policy = dict(part.strip().split(" ", 1) for part in content_security_policy(html).split(";"))
    digest = base64.b64encode(hashlib.sha256(b"go()").digest()).decode()
    assert policy["script-src"] == f"'sha256-{digest}'"
    assert policy["style-src"].startswith("'sha256-") and policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'self'" and policy["frame-ancestors"] == "'none'"
    assert "script-src 'none'" in content_security_policy("<p>no script</p>")
