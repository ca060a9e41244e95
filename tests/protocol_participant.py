"""A job's side of the checkpoint protocol, spoken over a real broker by a test, as a worker speaks
it: the job's registration on the control topic, its supervisor's heartbeats (the real
:class:`~tidemark.runtime.supervisor.heartbeat.SupervisorHeartbeats`, so the coordinator sees the job alive),
the control messages read back, and acks that write each task's state file into checkpoint
storage first.

Used by the service tests that play the job themselves (checkpoint services, operator API,
singleton services); each keeps its own way of waiting for and answering triggers.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tidemark.checkpoint_store import checkpoint_dir
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.messages import (
    CheckpointTrigger,
    JobRegistration,
    StateHandle,
    StateHandleKind,
    TaskAck,
    TaskAssignment,
    TaskSnapshot,
    TaskTimings,
)
from tidemark.runtime.supervisor.heartbeat import SupervisorHeartbeats
from tidemark.storage import open_storage
from tidemark.types import CheckpointingMode, Epoch, JobId


def now_ms() -> int:
    return int(time.time() * 1000)


class ProtocolParticipant:
    """An exactly-once job of ``tasks`` (all of them sources) in epoch 1, reading the control
    topic from its start. ``close`` closes the consumer."""

    def __init__(self, bootstrap: str, topics: TopicNames, storage_url: str, job: JobId,
                 tasks: tuple[TaskAssignment, ...], max_parallelism: int = 128) -> None:
        base = {"bootstrap.servers": bootstrap}
        self.job, self.topics, self.tasks, self.max_parallelism = job, topics, tasks, max_parallelism
        self.storage = open_storage(storage_url)
        self.producer = Producer(producer_config(base))
        self.consumer = Consumer(consumer_config(base, None))
        self.consumer.assign([TopicPartition(topics.control, 0, 0)])
        self.heartbeats = SupervisorHeartbeats(base, topics, job, lambda: 1).start()

    def send(self, topic: str, message: Any) -> None:
        self.producer.produce(topic, key=self.job.encode(), value=codec.encode(message))
        self.producer.flush(10)

    def register(self) -> None:
        self.send(self.topics.control, JobRegistration(
            job_id=self.job, epoch=Epoch(1), mode=CheckpointingMode.EXACTLY_ONCE,
            max_parallelism=self.max_parallelism, tasks=self.tasks,
            source_tasks=tuple(t.task_id for t in self.tasks), registered_at=now_ms()))

    def poll(self, timeout_s: float = 0.2) -> Any | None:
        """The next control message, decoded; None when none arrived within ``timeout_s``."""
        record = self.consumer.poll(timeout_s)
        if record is None or record.error():
            return None
        return codec.decode(record.value())

    def ack(self, trigger: CheckpointTrigger, task: TaskAssignment) -> TaskAck:
        """Write ``task``'s state file into the checkpoint's folder, then ack it with one full
        keyed handle of that file."""
        folder = checkpoint_dir(self.job, trigger.checkpoint_id, trigger.checkpoint_type)
        data = f"state of {task.task_id} at {trigger.checkpoint_id}".encode()
        state_file = self.storage.write_bytes(f"{folder}/{task.task_id.replace('#', '-')}.state", data)
        handle = StateHandle(StateHandleKind.KEYED_FULL, task.operator_id, task.key_group_start,
                             task.key_group_end, (state_file,), state_file.size_bytes, state_file.size_bytes)
        ack = TaskAck(job_id=self.job, checkpoint_id=trigger.checkpoint_id,
                      task=TaskSnapshot(task.task_id, task.operator_id, task.subtask_index, task.key_group_start,
                                        task.key_group_end, state_handles=(handle,)),
                      timings=TaskTimings(sync_ms=1, async_ms=2), acked_at=now_ms(), epoch=trigger.epoch)
        self.send(self.topics.acks, ack)
        return ack

    def close(self) -> None:
        self.heartbeats.stop()
        self.consumer.close()
