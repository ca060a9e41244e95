"""The four services together with a changelog job played by the test (real broker, real
checkpoint storage): materializations are made, announced and referenced by later checkpoints,
the changelog is truncated behind them, a savepoint older than several materializations keeps
its ranges, restores read exactly the right state, and killing the materializer or the changelog
service loses nothing."""

from __future__ import annotations

import random
import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from changelog_helpers import keys_in, random_ops, visible
from state_operations import apply_ops
from service_helpers import (
    MAX_P,
    OPERATOR,
    Bus,
    assignments,
    changelog_status,
    key_groups,
    metric,
    registration,
)
from tidemark.local.pipeline import wait_for
from tidemark.changelog import ChangelogReader, ChangelogWriter
from tidemark.checkpoint_store import read_metadata
from tidemark.kafka.clients import consumer_config
from tidemark.kafka.topics import TopicNames
from tidemark.local.cluster import LocalCluster
from tidemark.protocol import codec
from tidemark.runtime.supervisor.heartbeat import SupervisorHeartbeats
from tidemark.protocol.messages import (
    CheckpointAborted,
    CheckpointCompleted,
    CheckpointDiscarded,
    CheckpointTrigger,
    MaterializationEvent,
    MaterializationStatus,
    SavepointRequest,
    TaskAck,
    TaskTimings,
)
from tidemark.state import HashMapStateBackend, KeyedSnapshot
from tidemark.changelog.backend import ChangelogStateBackend, restore_from_changelog
from tidemark.storage import open_storage
from tidemark.types import CheckpointType, Epoch, JobId

pytestmark = pytest.mark.integration

PARTITIONS = 4
TASKS = assignments(2)  # two partitions per task


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap, tmp_path_factory):
    home = tmp_path_factory.mktemp("changelog-pipeline")
    storage_url = (home / "checkpoints").as_uri()
    env = {"TIDEMARK_CHECKPOINT_STORAGE_URL": storage_url, "TIDEMARK_CHECKPOINT__INTERVAL_MS": "500",
           "TIDEMARK_RETAINED_CHECKPOINTS": "2", "TIDEMARK_MATERIALIZATION__INTERVAL_MS": "1000",
           "TIDEMARK_MATERIALIZATION__JITTER_MS": "200", "TIDEMARK_MATERIALIZATION__TICK_MS": "100",
           "TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS": "300"}
    topics = TopicNames(f"t-pipeline-{uuid.uuid4().hex[:8]}")
    with LocalCluster(home, kafka_bootstrap, topic_prefix=topics.prefix, env=env) as cluster:
        cluster.start(["coordinator", "checkpoint-store", "changelog", "materializer"])
        cluster.wait_ready(timeout_s=90)
        yield cluster, topics, open_storage(storage_url)


class ChangelogJob:
    """A two-task job in changelog mode, played by the test as the workers would: it answers
    triggers with changelog snapshots, confirms completed checkpoints, and rebases on the
    materializations announced for its tasks. ``expected[checkpoint][task]`` is what each task
    held at that checkpoint."""

    def __init__(self, bus: Bus, topics: TopicNames, job: JobId, storage) -> None:
        self.bus, self.topics, self.job = bus, topics, job
        self.storage = storage  # a changelog checkpoint writes no files
        self.topic = topics.changelog(job, OPERATOR)
        self.consumer = Consumer(consumer_config(bus.client, None))
        self.consumer.assign([TopicPartition(topics.control, 0, 0),
                              TopicPartition(topics.materializations, 0, 0)])
        bus.send(topics.control, registration(job, TASKS, PARTITIONS))
        self.heartbeats = SupervisorHeartbeats(bus.client, topics, job, lambda: 1).start()  # the job is alive
        wait_for(lambda: bus.partitions(self.topic) == PARTITIONS, what="changelog topic created")
        self.tasks = {a.task_id: ChangelogStateBackend(
            HashMapStateBackend(key_groups(a), MAX_P, operator_id=OPERATOR),
            ChangelogWriter(bus.client, self.topic, partitions=PARTITIONS, max_parallelism=MAX_P,
                            job_id=job, task_id=a.task_id, epoch=Epoch(1))) for a in TASKS}
        self.rng = random.Random(job)
        self.expected: dict[int, dict[str, dict]] = {}
        self.completed: list[CheckpointCompleted] = []
        self.events: list[MaterializationEvent] = []
        self.accepted: list[MaterializationEvent] = []
        self.accepted_by: int = 0  # the newest checkpoint triggered when one was accepted

    def run(self, until, timeout_s: float = 60.0, what: str = "condition") -> None:
        """Work and take part in checkpoints until ``until()``."""
        deadline = time.monotonic() + timeout_s
        while not until():
            assert time.monotonic() < deadline, f"{what} not reached within {timeout_s}s"
            for task in self.tasks.values():
                apply_ops(task, random_ops(self.rng, keys_in(task.key_group_range), 10))
            for record in self.consumer.consume(100, 0.05):
                if record.error() is None:
                    self._on(codec.decode(record.value()))

    def _on(self, message) -> None:
        if getattr(message, "job_id", None) != self.job:
            return
        if isinstance(message, CheckpointTrigger) and message.epoch == 1:
            self._ack(message)
        elif isinstance(message, CheckpointCompleted):
            for task in self.tasks.values():
                task.notify_checkpoint_complete(message.checkpoint_id)
            self.completed.append(message)
        elif isinstance(message, CheckpointAborted):
            for task in self.tasks.values():
                task.notify_checkpoint_aborted(message.checkpoint_id)
        elif isinstance(message, MaterializationEvent) and message.status is MaterializationStatus.COMPLETED:
            self.events.append(message)
            if self.tasks[message.task_id].notify_materialization(message):
                self.accepted.append(message)
                self.accepted_by = max(self.expected, default=0)

    def _ack(self, trigger: CheckpointTrigger) -> None:
        self.expected[trigger.checkpoint_id] = {}
        for assignment in TASKS:
            task = self.tasks[assignment.task_id]
            snapshot = task.snapshot(trigger.checkpoint_id, self.storage)
            self.expected[trigger.checkpoint_id][assignment.task_id] = visible(task)
            ack = TaskAck(self.job, trigger.checkpoint_id,
                          snapshot.to_task_snapshot(assignment.task_id, OPERATOR, assignment.subtask_index),
                          TaskTimings(), int(time.time() * 1000), trigger.epoch)
            self.bus.send(self.topics.acks, ack)

    def accepted_per_task(self) -> dict[str, int]:
        return {t: sum(1 for e in self.accepted if e.task_id == t) for t in self.tasks}

    def referenced(self, materializations: int) -> bool:
        """Every task accepted ``materializations`` and a later checkpoint completed."""
        if min(self.accepted_per_task().values()) < materializations:
            return False
        return any(c.checkpoint_id > self.accepted_by and c.checkpoint_type is CheckpointType.CHECKPOINT
                   for c in self.completed)

    def close(self) -> None:
        self.heartbeats.stop()
        self.consumer.close()
        for task in self.tasks.values():
            task.close()


def restore_and_check(job: ChangelogJob, storage, metadata_path: str, tmp_path) -> dict:
    """Restore every task of the checkpoint at ``metadata_path``; compare; the read stats."""
    metadata = read_metadata(storage, metadata_path)
    reader = ChangelogReader(job.bus.client, partitions=PARTITIONS, max_parallelism=MAX_P)
    stats = {}
    for snapshot in metadata.tasks:
        fresh = HashMapStateBackend(key_groups(snapshot), MAX_P, operator_id=OPERATOR)
        result = restore_from_changelog(fresh, [KeyedSnapshot.from_task_snapshot(snapshot)], storage, reader)
        assert visible(fresh) == job.expected[metadata.checkpoint_id][snapshot.task_id], snapshot.task_id
        stats[snapshot.task_id] = (snapshot, result.changelog)
        fresh.close()
    return stats


def retained_paths(root, job: JobId, savepoints: bool = False) -> list[str]:
    folder = root / job / "savepoints" if savepoints else root / job
    pattern = "sp-*/_metadata" if savepoints else "chk-*/_metadata"
    found = sorted(folder.glob(pattern), key=lambda p: int(p.parent.name.split("-")[1]))
    return [str(p.relative_to(root)) for p in found]


def no_rejections(bus: Bus, topics: TopicNames, job: JobId) -> bool:
    consumer = Consumer(consumer_config(bus.client, None))
    consumer.assign([TopicPartition(topics.checkpoint_events, 0, 0)])
    try:
        rejected = []
        for record in consumer.consume(10_000, 2.0):
            message = codec.decode(record.value()) if record.error() is None else None
            if isinstance(message, CheckpointDiscarded) and message.job_id == job \
                    and message.reason.startswith("rejected"):
                rejected.append(message)
        return not rejected
    finally:
        consumer.close()


def test_materializations_truncate_behind_them_and_a_savepoint_keeps_its_ranges(deployment, tmp_path) -> None:
    cluster, topics, storage = deployment
    root = storage.root
    job = ChangelogJob(Bus(cluster.bootstrap), topics, JobId(f"job-{uuid.uuid4().hex[:6]}"), storage)
    try:
        job.run(lambda: job.referenced(1), what="a first materialization referenced")
        job.bus.send(topics.control, SavepointRequest(job.job, uuid.uuid4().hex, False, int(time.time() * 1000)))
        job.run(lambda: retained_paths(root, job.job, savepoints=True), what="a savepoint")
        savepoint_path = retained_paths(root, job.job, savepoints=True)[0]
        savepoint = read_metadata(storage, savepoint_path)
        before = sum(job.accepted_per_task().values())
        job.run(lambda: sum(job.accepted_per_task().values()) >= before + 6 and job.referenced(4),
                timeout_s=90, what="three more materializations per task")

        held = {}
        for snapshot in savepoint.tasks:
            for r in snapshot.changelog_ranges:
                held[r.partition] = min(held.get(r.partition, r.start_offset), r.start_offset)
        changelog = cluster.services["changelog"]
        status = {p["partition"]: p for p in changelog_status(changelog)["partitions"]
                  if p["job"] == job.job}
        assert len(status) == PARTITIONS
        for partition, start in held.items():
            assert 0 < status[partition]["truncated_before"] <= start  # truncated, but not its ranges
            assert status[partition]["materialized_before"] > start  # materializations went further

        assert no_rejections(job.bus, topics, job.job)  # the store accepted every shared file
        checkpoint_path = retained_paths(root, job.job)[-1]
        stats = restore_and_check(job, storage, checkpoint_path, tmp_path)
        by_id = {(e.task_id, e.materialization_id): e for e in job.events}
        for task_id, (snapshot, read) in stats.items():
            assert snapshot.materialization is not None and snapshot.state_handles
            covered = by_id[(task_id, snapshot.materialization.materialization_id)].covered_ranges
            ends = {(r.topic, r.partition): r.end_offset for r in covered}
            for tp, lowest in read.lowest_offsets.items():  # nothing before the covered offsets
                assert lowest >= ends[tp], (task_id, tp, lowest, ends[tp])
        restore_and_check(job, storage, savepoint_path, tmp_path)  # its ranges are all still there

        materializer = cluster.services["materializer"]
        assert metric(materializer, "tidemark_materializations_total", job=job.job, outcome="completed") >= 8
        assert metric(materializer, "tidemark_materialization_last_size_bytes", job=job.job) > 0
        assert metric(materializer, "tidemark_materialization_upload_seconds_count", job=job.job) >= 8
        mode = "physical" if changelog_status(changelog)["delete_records"] == "supported" else "logical"
        assert metric(changelog, "tidemark_changelog_truncations_total", job=job.job, mode=mode) > 0
    finally:
        job.close()


def test_killing_the_materializer_or_the_changelog_service_loses_nothing(deployment, tmp_path) -> None:
    cluster, topics, storage = deployment
    job = ChangelogJob(Bus(cluster.bootstrap), topics, JobId(f"job-{uuid.uuid4().hex[:6]}"), storage)
    try:
        job.run(lambda: job.referenced(1), what="a first materialization referenced")
        assert cluster.stop_one("materializer", sig=signal.SIGKILL) == -signal.SIGKILL
        killed_at = int(time.time() * 1000)
        done = len(job.completed)
        job.run(lambda: len(job.completed) >= done + 3, what="checkpoints while the materializer is down")
        assert not [e for e in job.events if e.at > killed_at]  # only truncation is delayed
        cluster.start_one("materializer")
        cluster.wait_ready(timeout_s=60)
        accepted = job.accepted_per_task()
        job.run(lambda: all(n > accepted[t] for t, n in job.accepted_per_task().items()),
                what="materializations after the restart")
        log = cluster.services["materializer"].log_path.read_text().rsplit('"service starting"', 1)[1]
        assert log.count('"fold": "rebuild"') >= 2  # both replicas rebuilt from checkpoint + changelog

        changelog = cluster.services["changelog"]
        points = wait_for(lambda: {p["partition"]: p["truncated_before"]
                                   for p in changelog_status(changelog)["partitions"]
                                   if p["job"] == job.job and p["truncated_before"]},
                          what="truncation")
        assert cluster.stop_one("changelog", sig=signal.SIGKILL) == -signal.SIGKILL
        done = len(job.completed)
        job.run(lambda: len(job.completed) >= done + 3, what="checkpoints while the changelog service is down")
        restarted = cluster.start_one("changelog")
        cluster.wait_ready(timeout_s=60)

        def caught_up() -> dict[int, int] | None:  # replayed ("live") and its first pass over the job done
            status = changelog_status(restarted)
            return {p["partition"]: p["truncated_before"] for p in status["partitions"]
                    if p["job"] == job.job} if status["live"] else None

        rebuilt = wait_for(caught_up, what="the restarted changelog service caught up")
        assert all(rebuilt[p] >= point for p, point in points.items())  # rebuilt, never moved back

        more = min(job.accepted_per_task().values()) + 1
        job.run(lambda: job.referenced(more), what="the job goes on")
        restore_and_check(job, storage, retained_paths(storage.root, job.job)[-1], tmp_path)
    finally:
        job.close()
