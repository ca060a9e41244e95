"""``GET /jobs`` documents and ``tidemark jobs list`` text carry each job's state and reason."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))

from checkpoint_support import JOB, registration  # noqa: E402

from tidemark.checkpoint import CheckpointCoordinator, CheckpointingOptions  # noqa: E402
from tidemark.admin import render  # noqa: E402
from tidemark.admin.documents import job_document  # noqa: E402
from tidemark.types import JobId  # noqa: E402

OPTS = CheckpointingOptions(interval_ms=100, timeout_ms=1_000)


def test_job_documents_and_the_jobs_table_show_state_and_reason() -> None:
    running = CheckpointCoordinator(JOB, OPTS)
    running.apply(registration(epoch=2), 0)
    failed = CheckpointCoordinator(JobId("orders"), OPTS)
    failed.apply(replace(registration(epoch=1, job=JobId("orders")), finished=True, outcome="FAILED",
                         reason="input topic 'orders' does not exist (create it)"), 0)
    docs = [job_document(JOB, running), job_document(JobId("orders"), failed)]
    assert (docs[0]["state"], docs[0]["state_reason"]) == ("RUNNING", None)
    assert (docs[1]["state"], docs[1]["state_reason"]) == ("FAILED", "input topic 'orders' does not exist (create it)")
    lines = render.jobs_text({"jobs": docs}).splitlines()
    assert lines[0].split() == ["JOB", "STATE", "EPOCH", "COMPLETED", "FAILED", "LAST", "ID", "LAST",
                                 "SAVEPOINT", "WORKERS", "REASON"]
    assert lines[1].split() == ["job", "RUNNING", "2", "0", "0", "-", "-", "src:1", "agg:1"]
    assert lines[2].split()[:9] == ["orders", "FAILED", "1", "0", "0", "-", "-", "src:1", "agg:1"]
    assert lines[2].endswith("input topic 'orders' does not exist (create it)")


def test_a_stop_with_savepoint_in_flight_shows_as_running_stopping() -> None:
    assert render.job_state({"state": "RUNNING", "stopping": True}) == "RUNNING(stopping)"
    assert render.job_state({"state": "CANCELLED", "stopping": False}) == "CANCELLED"


def test_the_job_document_and_the_jobs_table_show_each_stages_workers() -> None:
    coordinator = CheckpointCoordinator(JOB, OPTS)
    assert job_document(JOB, coordinator)["workers"] == {}  # nothing registered yet
    base = registration(epoch=1, parallelism=3)  # src#0..2, agg#0..2
    coordinator.apply(replace(base, workers=(0, 0, 1, 0, 1, 2)), 0)
    document = job_document(JOB, coordinator)
    assert document["workers"] == {"src": [["src#0", "src#1"], ["src#2"]],
                                   "agg": [["agg#0"], ["agg#1"], ["agg#2"]]}
    assert json.loads(json.dumps(document)) == document
    (row,) = render.jobs_text({"jobs": [document]}).splitlines()[1:]
    assert row.split()[7:] == ["src:2", "agg:3"]


def test_a_job_known_only_by_its_supervisors_heartbeat_has_epoch_0() -> None:
    """A supervisor heartbeats before its first attempt; the job's epoch is then 0 (attempts count
    from 1), not the ledger's -1, which made a fresh start's first attempt epoch 0 and its workers
    refuse ``--epoch 0``."""
    from tidemark.protocol.messages import SupervisorHeartbeat
    from tidemark.types import Epoch

    coordinator = CheckpointCoordinator(JOB, OPTS)
    coordinator.heard(SupervisorHeartbeat(JOB, Epoch(0), "host:1", 0), 0)
    assert job_document(JOB, coordinator)["epoch"] == 0


def test_the_job_document_and_the_jobs_table_show_the_last_savepoint() -> None:
    from checkpoint_support import ack_all, savepoint_request

    coordinator = CheckpointCoordinator(JOB, OPTS)
    reg = registration(epoch=1)
    coordinator.apply(reg, 0)
    coordinator.apply(savepoint_request("r1", 10), 10)
    coordinator.tick(20)
    (persist,) = ack_all(coordinator, reg, 1, 30)
    coordinator.apply(persist.metadata, 40)
    document = job_document(JOB, coordinator)
    saved = document["last_savepoint"]
    assert (saved["id"], saved["type"], saved["ended_at"]) == (1, "SAVEPOINT", 40)
    assert saved["metadata_path"] == persist.metadata_path and "savepoints/sp-1" in saved["metadata_path"]
    (row,) = render.jobs_text({"jobs": [document]}).splitlines()[1:]
    assert row.split()[5:7] == ["1", persist.metadata_path]
