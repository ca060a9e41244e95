"""One active instance of each service (tidemark.chassis.singleton): a second instance started while
the first runs fences it; the first exits with 75 and says why; the job's checkpoints continue,
and from the takeover on every checkpoint is triggered once (no second coordinator triggering)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from protocol_participant import ProtocolParticipant
from tidemark.exit_codes import EXIT_FENCED
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.protocol.messages import CheckpointCompleted, CheckpointTrigger, TaskAssignment
from tidemark.types import JobId, KeyGroup, OperatorId, task_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

JOB = JobId("singleton-job")
OPERATOR = OperatorId("counts")
TASKS = (TaskAssignment(task_id(OPERATOR, 0), OPERATOR, 0, KeyGroup(0), KeyGroup(127)),)
SERVICES = ["coordinator", "checkpoint-store", "changelog", "materializer"]


class Job(ProtocolParticipant):
    """A one-task job that acks every trigger, as a worker does."""

    def __init__(self, bootstrap: str, topics: TopicNames, storage_url: str) -> None:
        super().__init__(bootstrap, topics, storage_url, JOB, TASKS)
        self.triggers: list[CheckpointTrigger] = []
        self.completed: list[CheckpointCompleted] = []
        self.stopped = threading.Event()

    def serve(self, seconds: float) -> None:
        """Ack every trigger seen for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stopped.is_set():
            message = self.poll()
            if isinstance(message, CheckpointCompleted):
                self.completed.append(message)
            if isinstance(message, CheckpointTrigger):
                self.triggers.append(message)
                self.ack(message, TASKS[0])

    def stop(self, serving: threading.Thread) -> None:
        self.stopped.set()
        serving.join(5)  # before the consumer it polls is closed
        self.close()


def _wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_newer_instance_of_each_service_fences_the_older(kafka_bootstrap, topic_names, tmp_path) -> None:
    storage_url = (tmp_path / "checkpoints").as_uri()
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000",
           "TIDEMARK_CHECKPOINT__TIMEOUT_MS": "30000", "TIDEMARK_JOBS__LAUNCHER": "none"}
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix, env=env) as cluster:
        cluster.start(SERVICES)
        cluster.wait_ready(timeout_s=120)
        job = Job(kafka_bootstrap, topic_names, storage_url)
        serving = threading.Thread(target=job.serve, args=(400,), daemon=True)  # the job acks throughout
        try:
            job.register()
            serving.start()
            _wait(lambda: len(job.completed) >= 2, 30, "checkpoints complete before the takeover")
            for name in SERVICES:
                older = cluster.services[name]
                newer = cluster.start_one(name, env={"TIDEMARK_HOME": str(tmp_path / f"{name}-2")})
                assert older.process.wait(timeout=60) == EXIT_FENCED, older.log_tail()
                assert f"fenced: a newer {name} instance took over" in older.log_path.read_text()
                assert newer.process.poll() is None
                cluster.wait_ready(timeout_s=90, names=[name])
            before, first_trigger = len(job.completed), len(job.triggers)
            _wait(lambda: len(job.completed) >= before + 3, 60, "checkpoints continue with the new instances")
            ids = [t.checkpoint_id for t in job.triggers[first_trigger:]]
            assert len(ids) == len(set(ids)), f"a checkpoint was triggered twice: {ids}"
        finally:
            job.stop(serving)
