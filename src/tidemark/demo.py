"""``make demo``: the embedded defaults end to end, then a clean shutdown.

Starts the embedded broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` names one), the four services as
local processes, shows each one ready, passes a control round trip through Kafka (a job
registers, the coordinator triggers a checkpoint, the job's task acks it and the coordinator
consumes the ack), and stops everything. Ctrl-C at any point stops everything too.
"""

from __future__ import annotations

import re
import signal
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tidemark.broker.embedded import BrokerStatus, kafka_or_embedded
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.protocol import codec
from tidemark.protocol.messages import (
    CheckpointTrigger,
    JobRegistration,
    TaskAck,
    TaskAssignment,
    TaskSnapshot,
    TaskTimings,
)
from tidemark.services import SERVICES
from tidemark.types import CheckpointingMode, Epoch, JobId, KeyGroup, OperatorId, task_id


class _Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


def _wait_for_trigger(consumer: Consumer, job: str, timeout_s: float) -> CheckpointTrigger:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        record = consumer.poll(0.5)
        if record is None or record.error():
            continue
        message = codec.decode(record.value())
        if isinstance(message, CheckpointTrigger) and message.job_id == job:
            return message
    raise TimeoutError(f"no checkpoint trigger for job {job} within {timeout_s}s")


def _consumed(metrics: bytes, service: str, topic: str) -> float:
    pattern = rf'tidemark_messages_consumed_total{{service="{service}",topic="{re.escape(topic)}"}} (\S+)'
    found = re.search(pattern, metrics.decode())
    return float(found.group(1)) if found else 0.0


def _round_trip(cluster: LocalCluster, topics: TopicNames, progress: _Progress) -> None:
    job = JobId("demo-access-log")
    task = task_id("counts", 0)
    base = {"bootstrap.servers": cluster.bootstrap}
    consumer = Consumer(consumer_config(base, None))
    consumer.assign([TopicPartition(topics.control, 0, 0)])
    producer = Producer(producer_config(base))
    try:
        registration = JobRegistration(
            job_id=job, epoch=Epoch(1), mode=CheckpointingMode.EXACTLY_ONCE, max_parallelism=128,
            tasks=(TaskAssignment(task, OperatorId("counts"), 0, KeyGroup(0), KeyGroup(127)),),
            source_tasks=(task,), registered_at=int(time.time() * 1000))
        producer.produce(topics.control, key=job.encode(), value=codec.encode(registration))
        producer.flush(10)
        progress.step(f"job {job} registered on {topics.control}")
        trigger = _wait_for_trigger(consumer, job, 30)
        progress.step(f"coordinator triggered checkpoint {trigger.checkpoint_id} ({trigger.mode.value})")
        ack = TaskAck(job_id=job, checkpoint_id=trigger.checkpoint_id,
                      task=TaskSnapshot(task, OperatorId("counts"), 0, KeyGroup(0), KeyGroup(127)),
                      timings=TaskTimings(), acked_at=int(time.time() * 1000), epoch=Epoch(1))
        producer.produce(topics.acks, key=job.encode(), value=codec.encode(ack))
        producer.flush(10)
        coordinator = cluster.services["coordinator"]
        deadline = time.monotonic() + 30
        while _consumed(coordinator.get("/metrics")[1], "coordinator", topics.acks) < 1:
            if time.monotonic() > deadline:
                raise TimeoutError("the coordinator did not consume the ack within 30s")
            time.sleep(0.3)
        progress.step(f"task {task} acked checkpoint {trigger.checkpoint_id}; the coordinator consumed it")
    finally:
        consumer.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(home: Path) -> int:
    """Run the demo; return the process exit code."""
    signal.signal(signal.SIGTERM, _interrupt)
    progress = _Progress()
    home = Path(home) / "demo"
    try:
        with kafka_or_embedded(home / "broker") as (bootstrap, status), \
                LocalCluster(home, bootstrap, topic_prefix=_prefix(status)) as cluster:
            progress.step(f"embedded broker ready at {bootstrap} (pid {status.pid})" if status
                          else f"using Kafka at {bootstrap}")
            cluster.start(list(SERVICES))
            cluster.wait_ready(timeout_s=90)
            for name, service in cluster.services.items():
                code, body = service.get("/readyz")
                progress.step(f"{name:<17} {service.url}/readyz -> {code} {body.decode()}")
            _round_trip(cluster, TopicNames(cluster.topic_prefix), progress)
            codes = cluster.stop()
        progress.step(f"services stopped: {codes}")
        if any(codes.values()):
            print("demo FAILED: a service did not stop cleanly")
            return 1
        print("demo OK")
        return 0
    except KeyboardInterrupt:
        progress.step("interrupted; stopping everything")
        return 130


def _prefix(embedded: BrokerStatus | None) -> str:
    """A fresh topic prefix on a shared Kafka; the default one on the demo's own broker."""
    return "tidemark" if embedded else f"tidemark-demo-{uuid.uuid4().hex[:6]}"
