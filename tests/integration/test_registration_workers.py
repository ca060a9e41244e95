"""The coordinator service and ``JobRegistration.workers`` (v4) on the real broker: GET /jobs shows
each stage's tasks by worker; a registration whose workers do not fit its tasks is rejected (not
folded, dead-lettered with the reason), live and again after a restart's replay."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tidemark.checkpoint import plan_assignments
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster, LocalService
from tidemark.protocol import codec
from tidemark.protocol.dead_letters import DeadLetter
from tidemark.protocol.messages import JobRegistration
from tidemark.runtime.supervisor.heartbeat import SupervisorHeartbeats
from tidemark.types import CheckpointingMode, Epoch, JobId, OperatorId

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SPREAD, SINGLE = JobId("spread"), JobId("single")
COUNTS = OperatorId("minute_counts")


def _registration(job: JobId, epoch: int, workers: tuple[int, ...]) -> JobRegistration:
    tasks = plan_assignments((COUNTS,), 3, 128)
    return JobRegistration(job, Epoch(epoch), CheckpointingMode.EXACTLY_ONCE, 128, tasks,
                           tuple(t.task_id for t in tasks), int(time.time() * 1000), workers=workers)


def _jobs(service: LocalService) -> dict[str, Any]:
    status, body = service.get("/api/v1/jobs", timeout_s=10)
    return {j["job"]: j for j in json.loads(body)["jobs"]} if status == 200 else {}


def _wait_for_job(service: LocalService, job: JobId) -> dict[str, Any]:
    """The job once the coordinator folded a registration of it (its supervisor's heartbeats
    alone already list it, without workers)."""
    deadline = time.monotonic() + 60
    while not (found := _jobs(service).get(job) or {}).get("workers"):
        assert time.monotonic() < deadline, f"the coordinator never showed {job}: {service.log_tail()}"
        time.sleep(0.3)
    return found


def _dead_letters(bootstrap: str, topic: str, at_least: int, timeout_s: float = 30.0) -> list[DeadLetter]:
    consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, None))
    consumer.assign([TopicPartition(topic, 0, 0)])
    letters, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(letters) < at_least:
        record = consumer.poll(0.3)
        if record is not None and not record.error():
            letters.append(codec.decode_as(record.value(), DeadLetter))
    while (record := consumer.poll(1.0)) is not None:  # and nothing more
        if not record.error():
            letters.append(codec.decode_as(record.value(), DeadLetter))
    consumer.close()
    return letters


def test_workers_are_shown_and_a_registration_whose_workers_do_not_fit_is_rejected(
        kafka_bootstrap: str, topic_names: TopicNames, tmp_path: Any) -> None:
    spread = _registration(SPREAD, 1, (0, 0, 1))
    rejected = {
        "length": _registration(SPREAD, 2, (0, 1)),
        "negative": _registration(SPREAD, 3, (0, -1, 1)),
    }
    single = _registration(SINGLE, 1, ())  # as a writer before v4, or one worker per stage
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix) as cluster:
        cluster.start(["coordinator"])
        cluster.wait_ready(timeout_s=90)
        service = cluster.services["coordinator"]
        heartbeats = [SupervisorHeartbeats({"bootstrap.servers": kafka_bootstrap}, topic_names, job, lambda: 1).start()
                      for job in (SPREAD, SINGLE)]  # their supervisors, alive
        producer = Producer(producer_config({"bootstrap.servers": kafka_bootstrap}))
        for registration in (spread, *rejected.values(), single):  # one partition: in this order
            producer.produce(topic_names.control, key=registration.job_id.encode(), value=codec.encode(registration))
        producer.flush(10)

        _wait_for_job(service, SINGLE)  # after the rejected ones on the control topic
        jobs = _jobs(service)
        assert (jobs[SPREAD]["epoch"], jobs[SPREAD]["state"]) == (1, "RUNNING"), "attempts 2 and 3 were not folded"
        assert jobs[SPREAD]["workers"] == {COUNTS: [["minute_counts#0", "minute_counts#1"], ["minute_counts#2"]]}
        assert jobs[SINGLE]["workers"] == {COUNTS: [["minute_counts#0", "minute_counts#1", "minute_counts#2"]]}
        for beating in heartbeats:
            beating.stop()

        letters = _dead_letters(kafka_bootstrap, topic_names.dead_letters, 2)
        assert [(d.origin_topic, d.error_type, d.service) for d in letters] == [
            (topic_names.control, "invalid-registration", "coordinator")] * 2
        assert [d.error_message for d in letters] == [
            "registration of job spread attempt 2 rejected: it names a worker for 2 task(s) but has 3 task(s); "
            "workers must hold one index per task, in the order of tasks",
            "registration of job spread attempt 3 rejected: task minute_counts#1 has the negative worker index -1"]
        assert [codec.decode(d.value or b"") for d in letters] == list(rejected.values())
        log = service.log_path.read_text(errors="replace")
        warnings = [line for line in log.splitlines() if "invalid-registration" in line]
        assert len(warnings) == 2 and "Traceback" not in log, warnings
        metrics = service.get("/metrics")[1].decode()
        assert re.search(r'tidemark_dead_letters_total{reason="invalid-registration",service="coordinator",'
                         r'topic="[^"]+"} 2.0', metrics)

        port = service.port
        cluster.stop_one("coordinator")
        cluster.start_one("coordinator", port=port)
        cluster.wait_ready(timeout_s=90, names=["coordinator"])
        rebuilt = _wait_for_job(cluster.services["coordinator"], SPREAD)
        assert (rebuilt["epoch"], rebuilt["workers"]) == (1, jobs[SPREAD]["workers"]), "the replay rejects them too"
        assert len(_dead_letters(kafka_bootstrap, topic_names.dead_letters, 3, timeout_s=5)) == 2, \
            "a replayed rejection is logged again, not dead-lettered again"
