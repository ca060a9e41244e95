"""How a task's replica gets from the checkpoint it holds to a newer one: extend it with the new
part of the changelog ranges, or rebuild it from the newer checkpoint.

Pure. A replica always holds exactly what *restoring* one task checkpoint gives (its
materialized handles, then its ranges, read as a restore reads them). Extending is allowed only
when that stays true, i.e. when the newer checkpoint's state is the held state plus the owners'
records at or after the held ranges' ends:

* same job attempt (epoch), task, key groups and changelog topic, and a newer checkpoint;
* the same base: the same handles and materialization, or a materialization this replica
  produced since it was (re)built (the task accepted it: its ranges now start after that
  checkpoint, whose state the replica passed through);
* with the same base, every held range reappears with its start and an end at least as far;
* every newer range that starts below what was read of its partition starts inside a held range
  of that partition and ends at or after that range's end (the same writer, further on).

Anything else (a restore, a rescale, a checkpoint older than the held one) rebuilds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tidemark.materializer.materializer_ledger import TaskCheckpoint
from tidemark.protocol.messages import ChangelogRange
from tidemark.types import MaterializationId, TopicPartition


@dataclass(frozen=True, slots=True)
class ReplicaLineage:
    """What a replica holds: the state of ``checkpoint``, and the materializations it produced
    since its last rebuild."""

    checkpoint: TaskCheckpoint
    produced: frozenset[MaterializationId] = field(default_factory=frozenset)

    def with_produced(self, materialization_id: MaterializationId) -> ReplicaLineage:
        return ReplicaLineage(self.checkpoint, self.produced | {materialization_id})

    def at(self, checkpoint: TaskCheckpoint) -> ReplicaLineage:
        return ReplicaLineage(checkpoint, self.produced)


@dataclass(frozen=True, slots=True)
class Rebuild:
    """Discard the replica and restore the target checkpoint into a fresh one."""

    reason: str


@dataclass(frozen=True, slots=True)
class Extend:
    """Read the target's ranges, applying only records at or after ``resume`` per partition."""

    resume: dict[TopicPartition, int]


@dataclass(frozen=True, slots=True)
class Current:
    """The replica already holds the target checkpoint."""


FoldPlan = Rebuild | Extend | Current


def read_ends(ranges: Iterable[ChangelogRange]) -> dict[TopicPartition, int]:
    """Per partition, the end of the furthest range."""
    ends: dict[TopicPartition, int] = {}
    for r in ranges:
        tp = TopicPartition(r.topic, r.partition)
        ends[tp] = max(ends.get(tp, r.end_offset), r.end_offset)
    return ends


def plan_fold(lineage: ReplicaLineage | None, target: TaskCheckpoint) -> FoldPlan:
    """How to bring a replica holding ``lineage`` to ``target`` (see the module docstring)."""
    if lineage is None:
        return Rebuild("no replica yet")
    held = lineage.checkpoint
    if target.checkpoint_id == held.checkpoint_id and target.task == held.task:
        return Current()
    if target.checkpoint_id <= held.checkpoint_id:
        return Rebuild(f"checkpoint {target.checkpoint_id} is not newer than the held {held.checkpoint_id}")
    if (target.epoch, target.key_groups, target.task.task_id) != (held.epoch, held.key_groups, held.task.task_id):
        return Rebuild("another job attempt, task or key-group range")
    topics = {r.topic for r in (*held.task.changelog_ranges, *target.task.changelog_ranges)}
    if len(topics) > 1:
        return Rebuild(f"ranges in several topics {sorted(topics)}")
    same_base = (target.task.state_handles, target.task.materialization) == (
        held.task.state_handles, held.task.materialization)
    rebased = (target.task.materialization is not None
               and target.task.materialization.materialization_id in lineage.produced)
    if not (same_base or rebased):
        return Rebuild("its materialized base is not one this replica holds or produced")
    resume = read_ends(held.task.changelog_ranges)
    problem = _ranges_problem(held.task.changelog_ranges, target.task.changelog_ranges, resume, same_base)
    if problem:
        return Rebuild(problem)
    return Extend(resume)


def _ranges_problem(held: tuple[ChangelogRange, ...], target: tuple[ChangelogRange, ...],
                    resume: dict[TopicPartition, int], same_base: bool) -> str | None:
    if same_base:
        for old in held:
            if not any((r.partition, r.start_offset) == (old.partition, old.start_offset)
                       and r.end_offset >= old.end_offset for r in target):
                return f"held range {old.partition}:[{old.start_offset}, {old.end_offset}) is not extended"
    for r in target:
        if r.start_offset >= resume.get(TopicPartition(r.topic, r.partition), 0):
            continue
        if not any(old.partition == r.partition and old.start_offset <= r.start_offset < old.end_offset
                   and r.end_offset >= old.end_offset for old in held):
            return f"range {r.partition}:[{r.start_offset}, {r.end_offset}) does not continue a held one"
    return None
