"""The worker-hosts topic of one job: supervisors' assignments out to worker hosts, hosts' reports back.

``<prefix>.worker-hosts`` (one partition, kept a day, created with the service topics) carries
:class:`~tidemark.protocol.messages.HostAssignment` (supervisor -> host) and
:class:`~tidemark.protocol.messages.HostReport` (host -> supervisor), keyed by job. Both ends use
one :class:`HostChannel`: it reads from the topic's end at its creation (what was written before
a process started is not for it), and ``poll()`` never blocks, returning nothing during a broker
outage. ``send(..., wait=True)`` delivers before returning, waiting through an outage (an
assignment must arrive); ``wait=False`` only queues (a heartbeat or a report, superseded a second
later anyway).
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.messages import HostAssignment, HostReport
from tidemark.runtime.control import job_messages
from tidemark.types import JobId

HostMessage = HostAssignment | HostReport


class HostChannel:
    """See the module docstring. Lifecycle: construct -> ``send``/``poll`` -> ``close``."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId) -> None:
        self.topic = topics.worker_hosts
        self.job_id = job_id
        self._producer = Producer({**producer_config(client), "linger.ms": 0})
        self._wait = broker_wait(client)
        self._consumer = Consumer(consumer_config(client, None))
        partition = TopicPartition(self.topic, 0)
        _, end = self._consumer.get_watermark_offsets(partition, timeout=30.0, cached=False)
        self._consumer.assign([TopicPartition(self.topic, 0, end)])

    def send(self, message: HostMessage, *, wait: bool) -> None:
        failures: list[str] = []

        def delivered(error: Any, record: Any) -> None:
            if error is not None:
                failures.append(str(error))

        try:
            self._producer.produce(self.topic, key=self.job_id.encode(), value=codec.encode(message),
                                   on_delivery=delivered)
        except BufferError:  # a long outage filled the queue: a report is superseded anyway
            if wait:
                raise
        if not wait:
            self._producer.poll(0)
            return
        self._wait.deliver(self._producer, f"send {type(message).__name__} to {self.topic}")
        if failures:
            raise RuntimeError(f"{type(message).__name__} to {self.topic} not delivered: {failures[0]}")

    def poll(self, max_records: int = 500) -> list[HostMessage]:
        return job_messages(self._consumer, self.job_id, (HostAssignment, HostReport), max_records)

    def close(self) -> None:
        self._producer.flush(5)
        self._consumer.close()
