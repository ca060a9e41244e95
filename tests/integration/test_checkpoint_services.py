"""Coordinator and checkpoint-store services over a real broker, with a test job as participant.

The participant is the test itself: it registers a job of two tasks, answers triggers by writing
real state files into checkpoint storage and acking them, and reads the outcomes from the
control topic, as a worker does.
"""

from __future__ import annotations

import signal
import time

import pytest

from protocol_participant import ProtocolParticipant
from tidemark.local.cluster import LocalCluster
from tidemark.protocol.messages import CheckpointCompleted, CheckpointTrigger, TaskAck, TaskAssignment, TaskTimings
from tidemark.types import JobId, KeyGroup, OperatorId, task_id

pytestmark = pytest.mark.integration

JOB = JobId("orders")
OPERATOR = OperatorId("counts")
TASKS = (TaskAssignment(task_id(OPERATOR, 0), OPERATOR, 0, KeyGroup(0), KeyGroup(63)),
         TaskAssignment(task_id(OPERATOR, 1), OPERATOR, 1, KeyGroup(64), KeyGroup(127)))


class Participant(ProtocolParticipant):
    """A two-task job that speaks the protocol over Kafka."""

    def __init__(self, bootstrap: str, topics, storage_url: str) -> None:
        super().__init__(bootstrap, topics, storage_url, JOB, TASKS)
        self.seen: list = []

    def next_of(self, kind: type, timeout_s: float = 30.0, after: int = 0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for message in self.seen:
                if isinstance(message, kind) and message.checkpoint_id > after:
                    return message
            message = self.poll()
            if message is not None:
                self.seen.append(message)
        raise TimeoutError(f"no {kind.__name__} after checkpoint {after} within {timeout_s}s")


@pytest.fixture
def deployment(kafka_bootstrap, topic_names, tmp_path):
    storage_url = (tmp_path / "checkpoints").as_uri()
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000",
           "TIDEMARK_CHECKPOINT__TIMEOUT_MS": "60000", "TIDEMARK_RETAINED_CHECKPOINTS": "2"}
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix, env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=60)
        participant = Participant(kafka_bootstrap, topic_names, storage_url)
        try:
            yield cluster, participant, tmp_path / "checkpoints"
        finally:
            participant.close()


def _complete_one(participant: Participant, after: int) -> CheckpointCompleted:
    trigger = participant.next_of(CheckpointTrigger, after=after)
    for task in TASKS:
        participant.ack(trigger, task)
    return participant.next_of(CheckpointCompleted, after=after)


def test_checkpoints_complete_and_retention_keeps_exactly_n(deployment):
    cluster, participant, root = deployment
    participant.register()
    completed = [_complete_one(participant, 0)]
    for _ in range(3):
        completed.append(_complete_one(participant, completed[-1].checkpoint_id))
    ids = [c.checkpoint_id for c in completed]
    assert ids == sorted(ids)
    # the store made each _metadata durable before the coordinator announced completion; it
    # deletes a discarded checkpoint's _metadata first, then its state files
    def settled() -> bool:
        return (len(list((root / JOB).glob("chk-*/_metadata"))) == 2
                and not any(list((root / JOB / f"chk-{old}").glob("*")) for old in ids[:-2]))

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not settled():
        time.sleep(0.2)
    kept = sorted(int(p.parent.name.split("-")[1]) for p in (root / JOB).glob("chk-*/_metadata"))
    assert kept == ids[-2:], "retention keeps exactly the newest 2 checkpoints"
    for old in ids[:-2]:
        assert not list((root / JOB / f"chk-{old}").glob("*")), "files of discarded checkpoints are deleted"
    for new in ids[-2:]:
        assert len(list((root / JOB / f"chk-{new}").glob("*.state"))) == 2
    metrics = cluster.services["coordinator"].get("/metrics")[1].decode()
    assert f'tidemark_checkpoint_last_completed_id{{job="{JOB}"}}' in metrics


def test_duplicate_and_unknown_acks_change_nothing(deployment):
    _, participant, _ = deployment
    participant.register()
    trigger = participant.next_of(CheckpointTrigger)
    first = participant.ack(trigger, TASKS[0])
    participant.send(participant.topics.acks, first)  # duplicate
    unknown = TaskAck(job_id=JOB, checkpoint_id=trigger.checkpoint_id + 1000, task=first.task,
                      timings=TaskTimings(), acked_at=1, epoch=trigger.epoch)
    participant.send(participant.topics.acks, unknown)
    time.sleep(1.5)
    assert not any(isinstance(m, CheckpointCompleted) for m in participant.seen), \
        "a duplicate ack must not stand in for the missing task"
    participant.ack(trigger, TASKS[1])
    assert participant.next_of(CheckpointCompleted).checkpoint_id == trigger.checkpoint_id


def test_coordinator_killed_mid_checkpoint_rebuilds_from_kafka(deployment):
    cluster, participant, root = deployment
    participant.register()
    trigger = participant.next_of(CheckpointTrigger)
    participant.ack(trigger, TASKS[0])
    time.sleep(0.5)
    assert cluster.stop_one("coordinator", sig=signal.SIGKILL) == -signal.SIGKILL
    participant.ack(trigger, TASKS[1])  # arrives while no coordinator runs
    cluster.start_one("coordinator")
    cluster.wait_ready(timeout_s=60)
    completed = participant.next_of(CheckpointCompleted)
    assert completed.checkpoint_id == trigger.checkpoint_id
    assert (root / JOB / f"chk-{trigger.checkpoint_id}" / "_metadata").exists()
    # and checkpoints resume after the restart
    assert _complete_one(participant, completed.checkpoint_id).checkpoint_id > completed.checkpoint_id


def test_checkpoint_store_killed_loses_nothing(deployment):
    cluster, participant, root = deployment
    participant.register()
    first = _complete_one(participant, 0)
    assert cluster.stop_one("checkpoint-store", sig=signal.SIGKILL) == -signal.SIGKILL
    trigger = participant.next_of(CheckpointTrigger, after=first.checkpoint_id)
    for task in TASKS:
        participant.ack(trigger, task)
    time.sleep(1.0)
    assert not any(isinstance(m, CheckpointCompleted) and m.checkpoint_id == trigger.checkpoint_id
                   for m in participant.seen), "no completion before the metadata is durable"
    cluster.start_one("checkpoint-store")
    cluster.wait_ready(timeout_s=60)
    completed = participant.next_of(CheckpointCompleted, after=first.checkpoint_id)
    assert completed.checkpoint_id == trigger.checkpoint_id
    assert (root / JOB / f"chk-{trigger.checkpoint_id}" / "_metadata").exists()
