"""The changelog service as a process over the real broker, fed the records the coordinator,
checkpoint-store, materializer and workers write: topic creation, truncation points, their
reporting, savepoint protection, a restart, and (on a broker that has it) DeleteRecords."""

from __future__ import annotations

import random
import signal
import tempfile
import time

import pytest
from broker_gaps import tansu_gap
from confluent_kafka import Consumer, TopicPartition

from changelog_helpers import keys_in, random_ops
from state_operations import apply_ops
from service_helpers import (
    MAX_P,
    Bus,
    assignments,
    changelog_status,
    discarded,
    key_groups,
    materialized,
    metadata,
    metric,
    registration,
    truncation_points,
)
from tidemark.local.pipeline import wait_for
from tidemark.changelog import ChangelogWriter
from tidemark.local.cluster import LocalCluster
from tidemark.protocol.messages import MaterializationRef
from tidemark.state import HashMapStateBackend
from tidemark.changelog.backend import ChangelogStateBackend
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId, CheckpointType, Epoch, JobId, MaterializationId, OperatorId

pytestmark = pytest.mark.integration

JOB = JobId("orders")
PARTITIONS = 2
TASKS = assignments(2)  # task i owns key groups [64 i, 64 i + 63]: partition i


@pytest.fixture
def service(kafka_bootstrap, topic_names, tmp_path):
    env = {"TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS": "200"}
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix, env=env) as cluster:
        cluster.start(["changelog"])
        cluster.wait_ready(timeout_s=60)
        yield cluster


class Job:
    """Two changelog tasks and the records a job's checkpoints put on the bus."""

    def __init__(self, bus: Bus, topics, storage: FilesystemCheckpointStorage) -> None:
        self.bus, self.topics, self.storage = bus, topics, storage  # checkpoints write no files there
        self.topic = topics.changelog(JOB, "counts")
        bus.send(topics.control, registration(JOB, TASKS, PARTITIONS))
        wait_for(lambda: bus.partitions(self.topic) == PARTITIONS, what="changelog topic created")
        self.tasks = [ChangelogStateBackend(
            HashMapStateBackend(key_groups(a), MAX_P, operator_id="counts"),
            ChangelogWriter(bus.client, self.topic, partitions=PARTITIONS, max_parallelism=MAX_P,
                            job_id=JOB, task_id=a.task_id, epoch=Epoch(1))) for a in TASKS]
        self.rng = random.Random(1)
        self.next_materialization = 1

    def checkpoint(self, checkpoint_id: int, kind: CheckpointType = CheckpointType.CHECKPOINT):
        """Every task works, snapshots and confirms; the checkpoint is retained. Its snapshots."""
        snapshots = []
        for assignment, task in zip(TASKS, self.tasks):
            apply_ops(task, random_ops(self.rng, keys_in(task.key_group_range), 60))
            snapshot = task.snapshot(CheckpointId(checkpoint_id), self.storage)
            task.notify_checkpoint_complete(CheckpointId(checkpoint_id))
            snapshots.append(snapshot.to_task_snapshot(assignment.task_id, OperatorId("counts"),
                                                       assignment.subtask_index))
        self.bus.send(self.topics.checkpoint_events, metadata(JOB, checkpoint_id, snapshots, kind=kind))
        return snapshots

    def materialize(self, snapshots, checkpoint_id: int, only: tuple[int, ...] = (0, 1)) -> None:
        """The materializer announces checkpoint ``checkpoint_id`` of the tasks ``only``; they rebase."""
        for index in only:
            snapshot, task = snapshots[index], self.tasks[index]
            event = materialized(JOB, snapshot, checkpoint_id, self.next_materialization)
            self.bus.send(self.topics.materializations, event)
            assert task.notify_materialized(MaterializationRef(MaterializationId(self.next_materialization),
                                                               CheckpointId(checkpoint_id)), ())
            self.next_materialization += 1

    def close(self) -> None:
        for task in self.tasks:
            task.close()


@pytest.fixture
def job(kafka_bootstrap, topic_names, service, tmp_path):
    made = Job(Bus(kafka_bootstrap), topic_names, FilesystemCheckpointStorage(tmp_path / "checkpoints"))
    yield made
    made.close()


def ends(snapshots) -> dict[int, int]:
    return {r.partition: r.end_offset for s in snapshots for r in s.changelog_ranges}


def starts(snapshots) -> dict[int, int]:
    return {r.partition: r.start_offset for s in snapshots for r in s.changelog_ranges}


def test_truncates_what_materializations_cover_and_reports_it(service, job) -> None:
    changelog = service.services["changelog"]
    first = job.checkpoint(1)
    time.sleep(1)
    assert truncation_points(changelog) == {0: 0, 1: 0}  # nothing materialized yet
    job.materialize(first, 1, only=(0,))  # only task 0: partition 1 must wait for task 1
    second = job.checkpoint(2)
    job.bus.send(job.topics.checkpoint_events, discarded(JOB, 1))
    covered = ends(first)
    wait_for(lambda: truncation_points(changelog) == {0: covered[0], 1: 0}, what="partition 0 truncated")
    assert starts(second)[0] == covered[0]  # the rebased task's ranges start where truncation ends

    job.materialize(second, 2, only=(1,))
    third = job.checkpoint(3)
    job.bus.send(job.topics.checkpoint_events, discarded(JOB, 2))
    wait_for(lambda: truncation_points(changelog) == {0: covered[0], 1: ends(second)[1]},
             what="partition 1 truncated")
    status = changelog_status(changelog)
    by_partition = {p["partition"]: p for p in status["partitions"]}
    assert by_partition[1]["referenced_from"] == starts(third)[1] == ends(second)[1]
    assert by_partition[0]["materialized_before"] == covered[0]
    if status["delete_records"] == "unsupported":  # Tansu: truncation is logical
        assert metric(changelog, "tidemark_changelog_truncations_total", job=JOB, mode="logical") == 2
        assert metric(changelog, "tidemark_changelog_delete_records_unsupported_total") >= 1
        assert all(p["physically_truncated_before"] == 0 for p in status["partitions"])
        log = changelog.log_path.read_text()
        assert log.count("changelog truncated logically") == 2  # once per partition
    assert metric(changelog, "tidemark_changelog_truncated_records_total", job=JOB,
                  operator="counts") == covered[0] + ends(second)[1]
    wait_for(lambda: metric(changelog, "tidemark_changelog_truncated_bytes_total", job=JOB) > 0,
             what="truncated bytes counted")
    wait_for(lambda: metric(changelog, "tidemark_changelog_pending_bytes", job=JOB, operator="counts") > 0,
             what="pending bytes counted")


def test_a_savepoint_older_than_several_materializations_keeps_its_ranges(service, job) -> None:
    changelog = service.services["changelog"]
    first = job.checkpoint(1)
    job.materialize(first, 1)
    savepoint = job.checkpoint(2, CheckpointType.SAVEPOINT)  # its ranges start after checkpoint 1
    held = starts(savepoint)
    assert held == ends(first)
    previous = savepoint
    for checkpoint_id in range(3, 7):  # four more materializations, each subsuming the last
        job.materialize(previous, checkpoint_id - 1)
        previous = job.checkpoint(checkpoint_id)
        job.bus.send(job.topics.checkpoint_events, discarded(JOB, checkpoint_id - 1)
                     if checkpoint_id > 3 else discarded(JOB, 1))
    wait_for(lambda: truncation_points(changelog) == held, what="truncated up to the savepoint")
    time.sleep(1)
    status = {p["partition"]: p for p in changelog_status(changelog)["partitions"]}
    for partition, start in held.items():
        assert status[partition]["truncated_before"] == start
        assert status[partition]["materialized_before"] > start  # only the savepoint holds it back

    job.bus.send(job.topics.checkpoint_events, discarded(JOB, 2))  # the savepoint is deleted
    wait_for(lambda: truncation_points(changelog) == starts(previous), what="truncated past the savepoint")


def test_a_restarted_service_rebuilds_the_same_truncation_points(service, job) -> None:
    changelog = service.services["changelog"]
    first = job.checkpoint(1)
    job.materialize(first, 1)
    job.checkpoint(2)
    job.bus.send(job.topics.checkpoint_events, discarded(JOB, 1))
    expected = ends(first)
    wait_for(lambda: truncation_points(changelog) == expected, what="truncated")
    assert service.stop_one("changelog", sig=signal.SIGKILL) == -signal.SIGKILL

    third = job.checkpoint(3)  # the job goes on while the service is down
    restarted = service.start_one("changelog")
    service.wait_ready(timeout_s=60)
    wait_for(lambda: restarted.get("/changelog")[0] == 200 and changelog_status(restarted)["live"],
             what="caught up")
    assert truncation_points(restarted) == expected  # the same fold, the same points
    job.materialize(third, 3)
    job.checkpoint(4)
    job.bus.send(job.topics.checkpoint_events, discarded(JOB, 2), discarded(JOB, 3))
    wait_for(lambda: truncation_points(restarted) == ends(third), what="truncation resumed")


@tansu_gap("DeleteRecords")
def test_delete_records_moves_the_log_start_offset(kafka_bootstrap, topic_names, tmp_path) -> None:
    """Physical truncation: the log start offset of each changelog partition moves to the truncation point."""
    env = {"TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS": "200"}
    with LocalCluster(tmp_path, kafka_bootstrap, topic_prefix=topic_names.prefix, env=env) as cluster:
        cluster.start(["changelog"])
        cluster.wait_ready(timeout_s=60)
        job = Job(Bus(kafka_bootstrap), topic_names, FilesystemCheckpointStorage(tmp_path / "checkpoints"))
        try:
            first = job.checkpoint(1)
            job.materialize(first, 1)
            job.checkpoint(2)
            job.bus.send(job.topics.checkpoint_events, discarded(JOB, 1))
            expected = ends(first)
            changelog = cluster.services["changelog"]
            wait_for(lambda: {p["partition"]: p["physically_truncated_before"]
                              for p in changelog_status(changelog)["partitions"]} == expected,
                     what="physically truncated")
            consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": tempfile.mktemp()})
            try:
                for partition, offset in expected.items():
                    low, _ = consumer.get_watermark_offsets(TopicPartition(job.topic, partition), timeout=10)
                    assert low == offset
            finally:
                consumer.close()
            assert metric(changelog, "tidemark_changelog_truncations_total", job=JOB, mode="physical") >= 2
        finally:
            job.close()
