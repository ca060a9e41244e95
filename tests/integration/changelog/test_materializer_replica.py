"""The materializer's replicas against the real broker: folding completed checkpoints, extending
instead of rebuilding, incremental shared snapshots, and what a restore reads afterwards."""

from __future__ import annotations

import random

import pytest

from changelog_helpers import MAX_P, keys_in, random_ops, visible
from state_operations import apply_ops
from tidemark.changelog import ChangelogSource
from tidemark.changelog.backend import restore_from_changelog
from tidemark.materializer import (
    Current,
    Extend,
    Rebuild,
    TaskCheckpoint,
    TaskReplica,
    materialization_prefix,
    materialize,
)
from tidemark.protocol.messages import MaterializationRef
from tidemark.state import KeyGroupRange
from tidemark.types import CheckpointId, Epoch, JobId, MaterializationId, OperatorId, TaskId

pytestmark = pytest.mark.integration

ALL = KeyGroupRange(0, MAX_P - 1)
JOB = JobId("job")


def task_checkpoint(snapshot, checkpoint_id: int, epoch: int = 0) -> TaskCheckpoint:
    task = snapshot.to_task_snapshot(TaskId("op#0"), OperatorId("op"), 0)
    return TaskCheckpoint(JOB, CheckpointId(checkpoint_id), Epoch(epoch), MAX_P, task)


def materialized_state(event, make_backend, make_reader, storage, partitions):
    """What a task restoring only the materialized handles sees."""
    fresh = make_backend("heap", ALL)
    restore_from_changelog(fresh, [ChangelogSource(ALL, event.state_handles)], storage, make_reader(partitions))
    return visible(fresh)


@pytest.fixture
def replica(tmp_path):
    made = TaskReplica(tmp_path / "replica")
    yield made
    made.close()


def test_folds_extend_across_materializations_and_snapshots_share_files(
        make_topic, make_changelog_backend, make_backend, make_reader, storage, replica) -> None:
    topic, rng = make_topic(4), random.Random(21)
    task = make_changelog_backend("heap", ALL, topic, 4)
    apply_ops(task, random_ops(rng, keys_in(ALL), 300))
    cp1 = task.snapshot(CheckpointId(1), storage)
    task.notify_checkpoint_complete(CheckpointId(1))
    at_cp1 = visible(task)
    apply_ops(task, random_ops(rng, keys_in(ALL), 100))  # after the barrier: not in checkpoint 1

    first = materialize(task_checkpoint(cp1, 1), replica, storage, make_reader(4), MaterializationId(1), 0)
    assert first.fold == "rebuild" and first.event.covered_ranges == cp1.ranges
    assert materialized_state(first.event, make_backend, make_reader, storage, 4) == at_cp1
    files = [f for h in first.event.state_handles for f in h.files]
    prefix = materialization_prefix(JOB, TaskId("op#0"))
    assert files and all(f.shared and f.path.startswith(prefix + "/") for f in files)
    replica.produced(MaterializationId(1))

    cp2 = task.snapshot(CheckpointId(2), storage)  # same base: ranges extend those of checkpoint 1
    task.notify_checkpoint_complete(CheckpointId(2))
    at_cp2 = visible(task)
    second = materialize(task_checkpoint(cp2, 2), replica, storage, make_reader(4), MaterializationId(2), 0)
    assert second.fold == "extend"
    assert second.read.applied == 100  # only what came after checkpoint 1 is applied
    assert materialized_state(second.event, make_backend, make_reader, storage, 4) == at_cp2
    assert second.incremental_size_bytes < second.full_size_bytes  # unchanged files are reused

    ref = MaterializationRef(MaterializationId(1), CheckpointId(1))
    assert task.notify_materialized(ref, first.event.state_handles)  # the task rebases on M1
    replica.produced(MaterializationId(2))
    apply_ops(task, random_ops(rng, keys_in(ALL), 80))
    cp3 = task.snapshot(CheckpointId(3), storage)
    task.notify_checkpoint_complete(CheckpointId(3))
    ends_1 = {r.partition: r.end_offset for r in cp1.ranges}
    assert all(r.start_offset >= ends_1[r.partition] for r in cp3.ranges)
    third = materialize(task_checkpoint(cp3, 3), replica, storage, make_reader(4), MaterializationId(3), 0)
    assert third.fold == "extend" and third.read.applied == 80
    assert materialized_state(third.event, make_backend, make_reader, storage, 4) == visible(task)


def test_a_new_attempt_rebuilds_and_the_failed_attempts_late_changes_are_never_applied(
        make_topic, make_changelog_backend, make_backend, make_reader, storage, replica) -> None:
    topic, rng = make_topic(2), random.Random(5)
    old = make_changelog_backend("heap", ALL, topic, 2, epoch=0)
    apply_ops(old, random_ops(rng, keys_in(ALL), 150))
    cp1 = old.snapshot(CheckpointId(1), storage)
    old.notify_checkpoint_complete(CheckpointId(1))
    materialize(task_checkpoint(cp1, 1), replica, storage, make_reader(2), MaterializationId(1), 0)
    apply_ops(old, random_ops(rng, keys_in(ALL), 150))  # the failed attempt writes on
    old.snapshot(CheckpointId(2), storage)  # durable, but checkpoint 2 never completes

    new = make_changelog_backend("heap", ALL, topic, 2, epoch=1)
    new.restore([cp1], storage)
    for round_ in range(3):  # the zombie keeps writing between the new attempt's records
        apply_ops(new, random_ops(rng, keys_in(ALL), 40))
        new.snapshot(CheckpointId(10 + round_), storage)  # flushes: the records interleave in the topic
        apply_ops(old, random_ops(rng, keys_in(ALL), 40))
        old.snapshot(CheckpointId(20 + round_), storage)
    cp3 = new.snapshot(CheckpointId(3), storage)
    new.notify_checkpoint_complete(CheckpointId(3))
    outcome = materialize(task_checkpoint(cp3, 3, epoch=1), replica, storage, make_reader(2),
                          MaterializationId(2), 0)
    assert outcome.fold == "rebuild" and outcome.read.foreign > 0
    assert materialized_state(outcome.event, make_backend, make_reader, storage, 2) == visible(new)


def test_after_a_materialization_a_restore_reads_nothing_before_its_covered_offsets(
        make_topic, make_changelog_backend, make_backend, make_reader, storage, replica) -> None:
    topic, rng = make_topic(3), random.Random(8)
    task = make_changelog_backend("rocksdb", ALL, topic, 3)
    apply_ops(task, random_ops(rng, keys_in(ALL), 200))
    cp1 = task.snapshot(CheckpointId(1), storage)
    task.notify_checkpoint_complete(CheckpointId(1))
    outcome = materialize(task_checkpoint(cp1, 1), replica, storage, make_reader(3), MaterializationId(7), 0)
    ref = MaterializationRef(MaterializationId(7), CheckpointId(1))
    assert task.notify_materialization(outcome.event)
    apply_ops(task, random_ops(rng, keys_in(ALL), 60))
    cp2 = task.snapshot(CheckpointId(2), storage)
    assert cp2.materialization == ref and cp2.handles == outcome.event.state_handles

    covered = {(r.topic, r.partition): r.end_offset for r in outcome.event.covered_ranges}
    fresh = make_backend("rocksdb", ALL)
    result = restore_from_changelog(fresh, [cp2], storage, make_reader(3))
    assert visible(fresh) == visible(task)
    assert result.native_handles == outcome.event.state_handles
    assert result.changelog.lowest_offsets  # something was read, all of it after the covered part
    for tp, lowest in result.changelog.lowest_offsets.items():
        assert lowest >= covered[tp], (tp, lowest, covered[tp])


def test_a_state_defined_only_in_the_changelog_is_materialized_with_its_definition(
        make_topic, make_changelog_backend, make_backend, make_reader, storage, replica) -> None:
    """The replica never sees a descriptor: the definitions come from the changelog."""
    topic = make_topic(1)
    task = make_changelog_backend("heap", ALL, topic, 1)
    apply_ops(task, random_ops(random.Random(3), keys_in(ALL), 50))
    cp1 = task.snapshot(CheckpointId(1), storage)
    task.notify_checkpoint_complete(CheckpointId(1))
    outcome = materialize(task_checkpoint(cp1, 1), replica, storage, make_reader(1), MaterializationId(1), 0)
    assert outcome.read.metas == 4  # one definition per state, in the one partition
    assert sorted(m["name"] for m in replica.backend._state_metas()) == ["list", "map", "sum", "value"]


def test_a_checkpoint_that_is_not_newer_rebuilds(make_topic, make_changelog_backend, make_reader,
                                                 storage, replica) -> None:
    topic = make_topic(1)
    task = make_changelog_backend("heap", ALL, topic, 1)
    apply_ops(task, random_ops(random.Random(4), keys_in(ALL), 20))
    cp1 = task.snapshot(CheckpointId(1), storage)
    apply_ops(task, random_ops(random.Random(5), keys_in(ALL), 20))
    cp2 = task.snapshot(CheckpointId(2), storage)
    assert isinstance(replica.fold(task_checkpoint(cp2, 2), storage, make_reader(1)).plan, Rebuild)
    assert isinstance(replica.fold(task_checkpoint(cp2, 2), storage, make_reader(1)).plan, Current)
    assert isinstance(replica.fold(task_checkpoint(cp1, 1), storage, make_reader(1)).plan, Rebuild)
    assert isinstance(replica.fold(task_checkpoint(cp2, 2), storage, make_reader(1)).plan, Extend)


def test_a_migration_logged_in_the_changelog_is_followed_by_the_replica(
        make_topic, make_changelog_backend, make_backend, make_reader, storage, replica) -> None:
    """An attempt restores the checkpoint of an older version of the job and migrates a state's
    Avro schema; the replica, which never sees a descriptor, folds the ranges on either side of
    the migration and materializes the new schema, which a later restore reads as it is."""
    from tidemark.state import AvroSerializer, ValueStateDescriptor

    def visits(*extra: dict) -> ValueStateDescriptor:
        return ValueStateDescriptor("visits", serializer=AvroSerializer({"type": "record", "name": "Visits", "fields": [
            {"name": "hits", "type": "int"}, *extra]}))

    old, new = visits(), visits({"name": "country", "type": "string", "default": "?"})
    topic, keys = make_topic(2), keys_in(ALL)[:50]
    first = make_changelog_backend("rocksdb", ALL, topic, 2, epoch=0)
    for n, key in enumerate(keys):
        first.set_current_key(key)
        first.get_state(old).update({"hits": n})
    cp1 = first.snapshot(CheckpointId(1), storage)
    first.notify_checkpoint_complete(CheckpointId(1))
    materialize(task_checkpoint(cp1, 1), replica, storage, make_reader(2), MaterializationId(1), 0)

    second = make_changelog_backend("rocksdb", ALL, topic, 2, epoch=1)
    second.restore([cp1], storage)
    migrated = second.get_state(new)  # logs the new definition, then migrates
    second.set_current_key(keys[0])
    migrated.update({"hits": 100, "country": "nl"})
    cp2 = second.snapshot(CheckpointId(2), storage)
    second.notify_checkpoint_complete(CheckpointId(2))
    outcome = materialize(task_checkpoint(cp2, 2, epoch=1), replica, storage, make_reader(2), MaterializationId(2), 0)
    assert [m.get("schema_version") for m in replica.backend._state_metas() if m["name"] == "visits"] == [1]

    fresh = make_backend("heap", ALL)
    restore_from_changelog(fresh, [ChangelogSource(ALL, outcome.event.state_handles)], storage, make_reader(2))
    restored = fresh.get_state(new)
    for n, key in enumerate(keys):
        fresh.set_current_key(key)
        assert restored.value() == ({"hits": 100, "country": "nl"} if n == 0 else {"hits": n, "country": "?"})
