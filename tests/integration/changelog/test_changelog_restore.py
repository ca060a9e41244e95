"""Recovery from changelog ranges against the real broker, for both keyed backends."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import Producer

from changelog_helpers import MAX_P, keys_in, random_ops, restrict, visible
from state_operations import DESCRIPTORS, apply_ops
from tidemark.changelog import ChangelogReadError, ChangelogSource
from tidemark.changelog.backend import is_shareable, restore_from_changelog
from tidemark.materializer.storage import SharedFilesView
from tidemark.changelog.partitioning import record_key
from tidemark.protocol.messages import ChangelogRange, MaterializationRef
from tidemark.state import KeyGroupRange, compute_key_group_range
from tidemark.types import CheckpointId, MaterializationId, SequenceNumber

ALL = KeyGroupRange(0, MAX_P - 1)
KINDS = ["heap", "rocksdb"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", [1, 2])
def test_restore_equals_the_original_state(kind, seed, make_topic, make_changelog_backend,
                                           make_backend, make_reader, storage) -> None:
    topic = make_topic(4)
    task = make_changelog_backend(kind, ALL, topic, 4)
    ops = random_ops(random.Random(seed), keys_in(ALL), 400)
    apply_ops(task, ops)
    snapshot = task.snapshot(CheckpointId(1), storage)
    assert snapshot.handles == () and snapshot.materialization is None
    expected = visible(task)
    for restored_kind in KINDS:  # the changelog is backend-independent
        fresh = make_backend(restored_kind, ALL)
        result = restore_from_changelog(fresh, [snapshot], storage, make_reader(4))
        assert result.changelog.foreign == 0
        assert visible(fresh) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_changes_after_the_checkpoint_are_never_applied(kind, make_topic, make_changelog_backend,
                                                        make_backend, make_reader, storage) -> None:
    """A failed attempt keeps writing after checkpoint 1; then a new attempt (epoch 1) restores,
    while the old one, a zombie, still writes into the same partitions."""
    topic = make_topic(2)
    rng = random.Random(7)
    old = make_changelog_backend(kind, ALL, topic, 2, epoch=0)
    apply_ops(old, random_ops(rng, keys_in(ALL), 200))
    checkpoint_1 = old.snapshot(CheckpointId(1), storage)
    old.notify_checkpoint_complete(CheckpointId(1))
    at_checkpoint_1 = visible(old)
    apply_ops(old, random_ops(rng, keys_in(ALL), 200))  # written after the checkpoint
    old.snapshot(CheckpointId(2), storage)  # durable in the topic, but checkpoint 2 never completes
    assert visible(old) != at_checkpoint_1

    fresh = make_backend(kind, ALL)
    result = restore_from_changelog(fresh, [checkpoint_1], storage, make_reader(2))
    assert visible(fresh) == at_checkpoint_1
    in_ranges = sum(r.end_offset - r.start_offset for r in checkpoint_1.ranges)
    assert result.changelog.applied + result.changelog.metas == in_ranges  # changes and definitions

    new = make_changelog_backend(kind, ALL, topic, 2, epoch=1)
    new.restore([checkpoint_1], storage)
    assert visible(new) == at_checkpoint_1
    for round_ in range(4):  # interleave the zombie's and the new attempt's records
        apply_ops(new, random_ops(rng, keys_in(ALL), 50))
        new.snapshot(CheckpointId(10 + round_), storage)
        apply_ops(old, random_ops(rng, keys_in(ALL), 50))
        old.snapshot(CheckpointId(20 + round_), storage)
    checkpoint_3 = new.snapshot(CheckpointId(3), storage)
    assert set(checkpoint_1.ranges) <= set(checkpoint_3.ranges)  # carried until materialized
    expected = visible(new)
    again = make_backend(kind, ALL)
    result = restore_from_changelog(again, [checkpoint_3], storage, make_reader(2))
    assert visible(again) == expected
    assert result.changelog.foreign > 0  # the zombie's records inside the new ranges


@pytest.mark.parametrize("kind", KINDS)
def test_a_restore_from_files_private_to_a_savepoint_writes_a_base_of_its_own(
        kind, make_topic, make_changelog_backend, make_backend, make_reader, storage) -> None:
    """A savepoint's files belong to the savepoint (the checkpoint-store refuses a checkpoint
    that claims them): the restored task writes its state again as shared files and its
    checkpoints reference only those, with no ranges carried."""
    topic = make_topic(2)
    rng = random.Random(13)
    saved = make_backend(kind, ALL)
    apply_ops(saved, random_ops(rng, keys_in(ALL), 150))
    savepoint = saved.snapshot(CheckpointId(4), storage).handles  # canonical or native, private files
    assert not is_shareable(savepoint)
    with pytest.raises(ValueError, match="rebase_to"):
        make_changelog_backend(kind, ALL, topic, 2).restore([ChangelogSource(ALL, savepoint, ())], storage)

    base = SharedFilesView(storage, "job/materialized/op_0", "restored-e1")
    task = make_changelog_backend(kind, ALL, topic, 2, epoch=1, rebase_to=base)
    task.restore([ChangelogSource(ALL, savepoint, ())], storage)
    assert task.rebased and visible(task) == visible(saved)
    apply_ops(task, random_ops(rng, keys_in(ALL), 60))
    checkpoint_5 = task.snapshot(CheckpointId(5), storage)
    assert checkpoint_5.handles and is_shareable(checkpoint_5.handles)
    private = {f.path for h in savepoint for f in h.files if not f.shared}
    assert not private & {f.path for h in checkpoint_5.handles for f in h.files}  # (shared SSTs may be reused)
    assert checkpoint_5.materialization is None
    assert {r.start_offset for r in checkpoint_5.ranges} == {0}  # only this attempt's own changes
    again = make_backend(kind, ALL)
    restore_from_changelog(again, [checkpoint_5], storage, make_reader(2))
    assert visible(again) == visible(task)
    shared = make_changelog_backend(kind, ALL, topic, 2, epoch=2)  # shared files: referenced, not copied
    shared.restore([checkpoint_5], storage)
    assert not shared.rebased and shared.snapshot(CheckpointId(6), storage).handles == checkpoint_5.handles


@pytest.mark.parametrize("kind", KINDS)
def test_reset_after_abort_then_restore(kind, make_topic, make_changelog_backend, make_backend,
                                        make_reader, storage) -> None:
    topic = make_topic(3)
    rng = random.Random(3)
    task = make_changelog_backend(kind, ALL, topic, 3)
    apply_ops(task, random_ops(rng, keys_in(ALL), 100))
    task.snapshot(CheckpointId(1), storage)
    assert task.notify_checkpoint_aborted(CheckpointId(1))
    apply_ops(task, random_ops(rng, keys_in(ALL), 100))
    checkpoint_2 = task.snapshot(CheckpointId(2), storage)
    assert task.notify_checkpoint_complete(CheckpointId(2))
    fresh = make_backend(kind, ALL)
    restore_from_changelog(fresh, [checkpoint_2], storage, make_reader(3))
    assert visible(fresh) == visible(task)


def _materialize(source, key_groups, kind, checkpoint_id, make_backend, reader, storage):
    """Fold a completed checkpoint into a snapshot, as the materializer does (replica = fresh
    backend restored from the previous materialization plus the ranges)."""
    replica = make_backend(kind, key_groups)
    restore_from_changelog(replica, [source], storage, reader)
    for descriptor in DESCRIPTORS.values():  # the changelog carries no state metadata
        replica.get_state(descriptor)
    view = SharedFilesView(storage, f"job/materialized/kg-{key_groups.start}", f"m-{checkpoint_id}")
    return replica.snapshot(CheckpointId(1000 + checkpoint_id), view).handles


@pytest.mark.parametrize("kind", KINDS)
def test_materialization_truncates_and_later_restores_use_it(kind, make_topic, make_changelog_backend,
                                                             make_backend, make_reader, storage) -> None:
    topic = make_topic(3)
    rng = random.Random(11)
    task = make_changelog_backend(kind, ALL, topic, 3)
    apply_ops(task, random_ops(rng, keys_in(ALL), 150))
    checkpoint_1 = task.snapshot(CheckpointId(1), storage)
    with pytest.raises(ValueError):  # only a completed checkpoint can be materialized
        task.notify_materialized(MaterializationRef(MaterializationId(1), CheckpointId(1)), ())
    task.notify_checkpoint_complete(CheckpointId(1))
    apply_ops(task, random_ops(rng, keys_in(ALL), 150))
    handles = _materialize(checkpoint_1, ALL, kind, 1, make_backend, make_reader(3),
                           storage)
    ref = MaterializationRef(MaterializationId(1), CheckpointId(1))
    assert task.notify_materialized(ref, handles)
    assert not task.notify_materialized(ref, handles)  # duplicate announcement
    checkpoint_2 = task.snapshot(CheckpointId(2), storage)
    assert checkpoint_2.materialization == ref and checkpoint_2.handles == handles
    old_end = {r.partition: r.end_offset for r in checkpoint_1.ranges}
    assert all(r.start_offset >= old_end[r.partition] for r in checkpoint_2.ranges)
    fresh = make_backend(kind, ALL)
    result = restore_from_changelog(fresh, [checkpoint_2], storage, make_reader(3))
    assert result.native_handles == handles
    assert visible(fresh) == visible(task)


def test_rescale_two_to_three_and_back(make_topic, make_changelog_backend, make_backend, make_reader,
                                       storage) -> None:
    """Parallelism 2 -> 3 -> 2 over a 5-partition topic: partitions are shared by neighbouring
    tasks at both parallelisms.
    Tasks snapshot at different moments while the others keep writing; one task materializes
    while its neighbours still carry their predecessors' handles and ranges, so a restore must
    clip every source to its own key groups (list ``add`` would otherwise be applied twice)."""
    topic, rng = make_topic(5), random.Random(5)
    reader = make_reader(5)

    def generation(sources, parallelism, epoch, kind):
        tasks = []
        for i in range(parallelism):
            kgr = compute_key_group_range(MAX_P, parallelism, i)
            task = make_changelog_backend(kind, kgr, topic, 5, task=f"op#{i}", epoch=epoch)
            if sources:
                task.restore(sources, storage)
            tasks.append(task)
        return tasks

    def run(tasks, checkpoint_id):
        """Every task works, snapshots at its own barrier time, then works on (past the cut)."""
        snapshots, expected = [], {}
        for task in tasks:
            apply_ops(task, random_ops(rng, keys_in(task.key_group_range), 80))
        for task in tasks:
            snapshots.append(task.snapshot(CheckpointId(checkpoint_id), storage))
            expected.update(visible(task))
            for other in tasks:
                apply_ops(other, random_ops(rng, keys_in(other.key_group_range), 20))
        for task in tasks:
            task.notify_checkpoint_complete(CheckpointId(checkpoint_id))
        return snapshots, expected

    old = generation([], 2, 0, "heap")
    first, _ = run(old, 1)
    handles = _materialize(first[0], old[0].key_group_range, "heap", 1, make_backend,
                           reader, storage)
    assert old[0].notify_materialized(MaterializationRef(MaterializationId(1), CheckpointId(1)), handles)
    second, expected = run(old, 2)

    middle = generation(second, 3, 1, "rocksdb")
    for task in middle:
        assert visible(task) == restrict(expected, task.key_group_range)
    third, _ = run(middle, 3)
    handles = _materialize(third[1], middle[1].key_group_range, "rocksdb", 3, make_backend,
                           reader, storage)
    assert middle[1].notify_materialized(MaterializationRef(MaterializationId(1), CheckpointId(3)), handles)
    fourth, expected = run(middle, 4)
    assert fourth[1].handles == handles and fourth[0].handles != handles  # task 0 still carries

    final = generation(fourth, 2, 2, "heap")
    for task in final:
        assert visible(task) == restrict(expected, task.key_group_range)


def test_a_range_that_cannot_be_reached_fails_the_restore(make_topic, make_changelog_backend,
                                                          make_backend, make_reader, storage) -> None:
    topic = make_topic(1)
    task = make_changelog_backend("heap", ALL, topic, 1)
    apply_ops(task, random_ops(random.Random(1), keys_in(ALL), 20))
    (r,) = task.snapshot(CheckpointId(1), storage).ranges
    beyond = ChangelogRange(topic, 0, r.start_offset, SequenceNumber(r.end_offset + 5))
    with pytest.raises(ChangelogReadError, match="did not reach"):
        restore_from_changelog(make_backend("heap", ALL), [ChangelogSource(ALL, (), (beyond,))],
                               storage, make_reader(1, idle_timeout_s=1.0))


def test_an_undecodable_record_inside_a_range_fails_the_restore(make_topic, make_changelog_backend,
                                                                make_backend, make_reader, storage,
                                                                client) -> None:
    topic = make_topic(1)
    task = make_changelog_backend("heap", ALL, topic, 1)
    apply_ops(task, random_ops(random.Random(1), keys_in(ALL), 5))
    task.snapshot(CheckpointId(1), storage)
    producer = Producer(client)
    producer.produce(topic, b"not avro", b"not a key group", 0)  # no key-group key: skipped
    producer.produce(topic, b"not avro", record_key(5), 0)  # claims key group 5: must decode
    producer.flush(10)
    apply_ops(task, random_ops(random.Random(2), keys_in(ALL), 5))
    checkpoint = task.snapshot(CheckpointId(2), storage)
    with pytest.raises(ChangelogReadError, match="undecodable"):
        restore_from_changelog(make_backend("heap", ALL), [checkpoint], storage,
                               make_reader(1))
