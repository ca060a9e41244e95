"""The supervisor's evidence of life: a ``SupervisorHeartbeat`` on the heartbeats topic about every second.

The coordinator derives a job's state from it (:mod:`tidemark.checkpoint.liveness`): a job whose
supervisor falls silent is reported FAILED with the reason, never RUNNING, within seconds.

Lifecycle: ``SupervisorHeartbeats(client, topics, job_id, epoch)`` -> ``start()`` as the supervisor
starts (before it checks or starts anything: a start that takes long is still alive) -> ``stop()``
when it ends. A daemon thread writes the heartbeats, so a supervisor busy or waiting anywhere
(a worker start, the coordinator, a broker outage) still heartbeats, and one that is killed
stops at once. ``epoch()`` says which attempt it runs (0 before the first). Writes are
fire-and-forget: a heartbeat lost in a broker outage is replaced by the next.
"""

from __future__ import annotations

import contextvars
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException, Producer

from tidemark.chassis.logs import get_logger
from tidemark.clock import now_ms
from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.messages import SupervisorHeartbeat
from tidemark.types import Epoch, JobId

log = get_logger(__name__)
HEARTBEAT_S = 1.0


class SupervisorHeartbeats:
    """See the module docstring."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId, epoch: Callable[[], int]) -> None:
        self._config = producer_config(client, **{"message.timeout.ms": 30_000})
        self._topic = topics.heartbeats
        self.job_id = job_id
        self._epoch = epoch
        self.supervisor = f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> SupervisorHeartbeats:
        context = contextvars.copy_context()  # the process's bound log fields
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="heartbeat", daemon=True)
        self._thread.start()
        return self

    def heartbeat(self) -> SupervisorHeartbeat:
        return SupervisorHeartbeat(self.job_id, Epoch(self._epoch()), self.supervisor, now_ms())

    def _run(self) -> None:
        producer = Producer(self._config)
        key = self.job_id.encode()
        while True:
            try:
                producer.produce(self._topic, codec.encode(self.heartbeat()), key)
            except (BufferError, KafkaException) as exc:  # a long outage filled the queue: skip this one
                log.warning("heartbeat not queued", job=self.job_id, error=str(exc))
            producer.poll(0)
            if self._stop.wait(HEARTBEAT_S):
                break
        producer.flush(2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
