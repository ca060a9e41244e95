"""Periodic savepoints and their retained history through the real coordinator and
checkpoint-store on a real broker, with the test as the job's participant: a savepoint every 2 s,
one at a time, the two newest kept, the older ones' files deleted; the job's last savepoint in
``GET /api/v1/jobs`` and ``tidemark jobs list``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol_participant import ProtocolParticipant
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.protocol.messages import CheckpointCompleted, CheckpointTrigger, TaskAssignment
from tidemark.types import CheckpointType, JobId, KeyGroup, OperatorId, task_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

TOKEN = "periodic-savepoints-token-5d1e"
OPERATOR = OperatorId("counts")
TASKS = (TaskAssignment(task_id(OPERATOR, 0), OPERATOR, 0, KeyGroup(0), KeyGroup(63)),
         TaskAssignment(task_id(OPERATOR, 1), OPERATOR, 1, KeyGroup(64), KeyGroup(127)))


def get(url: str, path: str) -> Any:
    request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_periodic_savepoints_are_taken_one_at_a_time_and_the_oldest_disposed(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    storage_url = (tmp_path / "checkpoints").as_uri()
    topics = TopicNames(prefix=f"t-periodic-sp-{uuid.uuid4().hex[:8]}")
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_API_TOKEN": TOKEN,
           "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000", "TIDEMARK_CHECKPOINT__TIMEOUT_MS": "60000",
           "TIDEMARK_SAVEPOINTS__INTERVAL_S": "2", "TIDEMARK_SAVEPOINTS__RETAINED": "2"}
    job = JobId(f"periodic-{uuid.uuid4().hex[:6]}")
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topics.prefix, env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=60)
        url = cluster.services["coordinator"].url
        participant = ProtocolParticipant(kafka_bootstrap, topics, storage_url, job, TASKS, 128)
        try:
            participant.register()
            completed: list[CheckpointCompleted] = []
            triggers: list[CheckpointTrigger] = []
            deadline = time.monotonic() + 90
            while sum(c.checkpoint_type is CheckpointType.SAVEPOINT for c in completed) < 4:
                assert time.monotonic() < deadline, f"4 periodic savepoints not completed: {completed}"
                message = participant.poll()
                if getattr(message, "job_id", None) != job:
                    continue
                if isinstance(message, CheckpointTrigger) and message.checkpoint_id not in {t.checkpoint_id for t in triggers}:
                    triggers.append(message)
                    for task in TASKS:
                        participant.ack(message, task)
                elif isinstance(message, CheckpointCompleted):
                    completed.append(message)
        finally:
            participant.close()
        savepoints = [c for c in completed if c.checkpoint_type is CheckpointType.SAVEPOINT]
        # one at a time, at least the interval apart, and none a stop
        assert all(c.checkpoint_type is not CheckpointType.STOP_WITH_SAVEPOINT for c in completed)
        saved_at = [t.triggered_at for t in triggers if t.checkpoint_type is CheckpointType.SAVEPOINT]
        assert all(b - a >= 2000 for a, b in zip(saved_at, saved_at[1:])), saved_at
        newest = savepoints[-1].checkpoint_id
        kept: list[int] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the store deletes the older ones once the newest completed
            kept = [s["id"] for s in get(url, f"/api/v1/jobs/{job}/savepoints")["savepoints"]]
            if kept[-1:] == [newest] and len(kept) == 2:
                break
            time.sleep(0.2)
        assert kept == [savepoints[-2].checkpoint_id, newest]
        root = tmp_path / "checkpoints" / job / "savepoints"
        assert sorted(p.name for p in root.iterdir() if (p / "_metadata").exists()) == sorted(
            f"sp-{i}" for i in kept)
        (document,) = [j for j in get(url, "/api/v1/jobs")["jobs"] if j["job"] == job]
        assert document["state"] == "RUNNING"
        assert (document["last_savepoint"]["id"], document["last_savepoint"]["metadata_path"]) == (
            newest, f"{job}/savepoints/sp-{newest}/_metadata")
        cli_env = {**os.environ, "TIDEMARK_COORDINATOR_URL": url, "TIDEMARK_API_TOKEN": TOKEN}
        listed = subprocess.run([sys.executable, "-m", "tidemark.cli", "jobs", "list"], env=cli_env,
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        (row,) = [line for line in listed.stdout.splitlines() if line.startswith(job)]
        assert f"{job}/savepoints/sp-{newest}/_metadata" in row.split()
        log = (tmp_path / "logs").glob("coordinator*")
        text = "".join(p.read_text() for p in log)
        assert "periodic savepoint requested" in text and "savepoint disposed" in text
