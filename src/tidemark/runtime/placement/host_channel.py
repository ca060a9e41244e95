"""The worker-hosts topic of one job: supervisors' assignments out to worker hosts, hosts' reports back.

``<prefix>.worker-hosts`` (one partition, kept a day; created with the service topics, or by the
first supervisor or host that starts before the services did) carries
:class:`~tidemark.protocol.messages.HostAssignment` (supervisor -> host) and
:class:`~tidemark.protocol.messages.HostReport` (host -> supervisor), keyed by job. Both ends use
one :class:`HostChannel`: it reads from the topic's end at its creation (what was written before
a process started is not for it), and ``poll()`` never blocks, returning nothing during a broker
outage. ``deliver`` returns once its records are written, waiting through an outage (an
assignment must arrive); ``offer`` only queues (a heartbeat or a report, superseded a second
later anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.outage import broker_wait
from tidemark.kafka.topics import TopicNames
from tidemark.kafka.metadata import watermark_offsets
from tidemark.protocol import codec
from tidemark.protocol.messages import HostAssignment, HostReport
from tidemark.runtime.job.control import job_messages
from tidemark.types import JobId

HostMessage = HostAssignment | HostReport


class HostChannel:
    """See the module docstring. Lifecycle: construct -> ``offer``/``deliver``/``poll`` -> ``close``."""

    def __init__(self, client: dict[str, Any], topics: TopicNames, job_id: JobId, replication_factor: int) -> None:
        self.topic = topics.worker_hosts
        self.job_id = job_id
        ensure_topics(AdminClient(dict(client)), [s for s in topics.control_plane() if s.name == self.topic],
                      replication_factor)
        self._producer = Producer({**producer_config(client), "linger.ms": 0})
        self._wait = broker_wait(client)
        self._consumer = consumer = Consumer(consumer_config(client, None))
        _, end = self._wait.call("worker hosts topic end",
                                 lambda: watermark_offsets(consumer, self.topic, 0, timeout_s=30.0))
        self._consumer.assign([TopicPartition(self.topic, 0, end)])

    def offer(self, message: HostMessage) -> None:
        """Queue ``message`` without waiting (a heartbeat or report, superseded a second later)."""
        try:
            self._producer.produce(self.topic, key=self.job_id.encode(), value=codec.encode(message))
        except BufferError:  # a long outage filled the queue: a heartbeat or report is superseded anyway
            pass
        self._producer.poll(0)

    def deliver(self, messages: Sequence[HostMessage]) -> None:
        """Deliver every message before returning, waiting through a broker outage once for all."""
        key = self.job_id.encode()
        self._wait.deliver_records(self._producer, self.topic, [(key, codec.encode(m)) for m in messages],
                                   f"send {len(messages)} assignment(s) to {self.topic}")

    def poll(self, max_records: int = 500) -> list[HostMessage]:
        return job_messages(self._consumer, self.job_id, (HostAssignment, HostReport), max_records)

    def close(self) -> None:
        self._producer.flush(5)
        self._consumer.close()
