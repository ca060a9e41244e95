"""Which part of each changelog partition nobody needs any more (the changelog service's logic).

Pure: no I/O, no clock. Lifecycle: one :class:`ChangelogLedger` per deployment; ``apply`` every
record of the control topic (``JobRegistration``), the checkpoint-events topic
(``CheckpointMetadata``: retained, ``CheckpointDiscarded``: released) and the materializations
topic (``MaterializationEvent``), each topic in its own order, any interleaving; ``plan`` then
gives, for every partition of every registered changelog topic, the offset below which it may be
truncated. A ledger rebuilt from the same records plans the same points, so a restarted
service needs no state of its own.

The rule (rationale in ``docs/concepts/changelog.md``), for partition *p*::

    point(p) = min( the start of every range of p that a retained checkpoint or savepoint
                    references,
                    for every task of the job's newest registration whose key groups p holds:
                    the end of what that task's materializations covered in p )

The second term exists because a task's *next* checkpoints reference records that no retained
checkpoint references yet; a task only writes after what its materializations covered. A task
whose materializations never covered *p* (none yet, or it never wrote there) leaves *p*
untruncated: its records there may still be needed. The points only matter upwards: the caller
never moves a partition's truncation point back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tidemark.changelog.partitioning import key_groups_of
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import (
    CheckpointDiscarded,
    CheckpointMetadata,
    JobRegistration,
    MaterializationEvent,
    MaterializationStatus,
    TaskAssignment,
)
from tidemark.keygroups import UPPER_BOUND_MAX_PARALLELISM, KeyGroupRange
from tidemark.types import CheckpointId, JobId, OperatorId, TaskId, TopicPartition


@dataclass(frozen=True, slots=True)
class ChangelogTopic:
    """One registered changelog topic: whose it is and how its key groups are laid out."""

    name: str
    job_id: JobId
    operator_id: OperatorId
    max_parallelism: int
    tasks: tuple[TaskAssignment, ...]  # the operator's tasks in the job's newest registration


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """What bounds the truncation of one partition.

    ``materialized``: the offset before which every task that writes *p* had its records
    materialized (``None``: some task has no materialization covering *p*); ``referenced``: the
    lowest start of a range a retained checkpoint or savepoint references (``None``: none);
    ``point``: where the partition may be truncated (``None``: not at all yet).
    """

    topic: ChangelogTopic
    partition: int
    materialized: int | None
    referenced: int | None

    @property
    def point(self) -> int | None:
        if self.materialized is None:
            return None
        return self.materialized if self.referenced is None else min(self.materialized, self.referenced)


class ChangelogLedger:
    """Registrations, retained checkpoints and materializations, folded from their topics."""

    def __init__(self, names: TopicNames) -> None:
        self.names = names
        self.registrations: dict[JobId, JobRegistration] = {}
        self._retained: dict[JobId, dict[CheckpointId, CheckpointMetadata]] = defaultdict(dict)
        self._discarded: dict[JobId, set[CheckpointId]] = defaultdict(set)
        self._covered: dict[tuple[JobId, TaskId], dict[TopicPartition, int]] = defaultdict(dict)
        self.materializations: dict[tuple[JobId, TaskId], MaterializationEvent] = {}

    # ------------------------------------------------------------------ folding

    def apply(self, message: object) -> bool:
        """Fold one record; True when it changed what ``plan`` may return."""
        if isinstance(message, JobRegistration):
            return self._register(message)
        if isinstance(message, CheckpointMetadata):
            return self._retain(message)
        if isinstance(message, CheckpointDiscarded):
            self._discarded[message.job_id].add(message.checkpoint_id)
            return self._retained[message.job_id].pop(message.checkpoint_id, None) is not None
        if isinstance(message, MaterializationEvent):
            return self._materialized(message)
        return False

    def _register(self, registration: JobRegistration) -> bool:
        if not 1 <= registration.max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
            return False  # not a usable registration; nothing can be planned from it
        known = self.registrations.get(registration.job_id)
        if known is not None and known.epoch > registration.epoch:
            return False  # a late record of an attempt already superseded
        self.registrations[registration.job_id] = registration
        return known != registration

    def _retain(self, metadata: CheckpointMetadata) -> bool:
        job, cid = metadata.job_id, metadata.checkpoint_id
        if cid in self._discarded[job] or cid in self._retained[job]:
            return False
        self._retained[job][cid] = metadata
        return True

    def _materialized(self, event: MaterializationEvent) -> bool:
        if event.status is not MaterializationStatus.COMPLETED:
            return False
        key = (event.job_id, event.task_id)
        newest = self.materializations.get(key)
        if newest is None or newest.checkpoint_id <= event.checkpoint_id:
            self.materializations[key] = event
        covered, changed = self._covered[key], False
        for r in event.covered_ranges:
            tp = TopicPartition(r.topic, r.partition)
            if r.end_offset > covered.get(tp, -1):
                covered[tp] = r.end_offset
                changed = True
        return changed

    # ------------------------------------------------------------------ queries

    def retained(self, job_id: JobId) -> tuple[CheckpointMetadata, ...]:
        """The job's retained checkpoints and savepoints, by id."""
        kept = self._retained.get(job_id, {})
        return tuple(kept[c] for c in sorted(kept))

    def topics(self) -> list[ChangelogTopic]:
        """Every changelog topic of every registered job (newest registration per job)."""
        found = []
        for job, registration in sorted(self.registrations.items()):
            for operator in dict.fromkeys(registration.changelog_operators):
                tasks = tuple(t for t in registration.tasks if t.operator_id == operator)
                found.append(ChangelogTopic(self.names.changelog(job, operator), job, operator,
                                            registration.max_parallelism, tasks))
        return found

    def plan(self, partitions: Mapping[str, int]) -> list[PartitionPlan]:
        """The bounds of every partition of every registered topic whose partition count
        ``partitions`` knows (topics not created yet are left out)."""
        plans = []
        for topic in self.topics():
            count = partitions.get(topic.name)
            if not count or count > topic.max_parallelism:
                continue  # not created yet, or not laid out as a changelog of this job
            starts = self._referenced_starts(topic)
            for partition in range(count):
                plans.append(PartitionPlan(topic, partition,
                                           self._materialized_before(topic, partition, count),
                                           starts.get(partition)))
        return plans

    def _referenced_starts(self, topic: ChangelogTopic) -> dict[int, int]:
        starts: dict[int, int] = {}
        for metadata in self._retained.get(topic.job_id, {}).values():
            for task in metadata.tasks:
                for r in task.changelog_ranges:
                    if r.topic == topic.name and r.start_offset < starts.get(r.partition, r.start_offset + 1):
                        starts[r.partition] = r.start_offset
        return starts

    def _materialized_before(self, topic: ChangelogTopic, partition: int, count: int) -> int | None:
        held = key_groups_of(partition, count, topic.max_parallelism)
        writers = [t for t in topic.tasks if _overlaps(t, held)]
        ends = [self._covered.get((topic.job_id, t.task_id), {}).get(TopicPartition(topic.name, partition))
                for t in writers]
        if not writers or any(end is None for end in ends):
            return None
        return min(end for end in ends if end is not None)


def _overlaps(task: TaskAssignment, key_groups: KeyGroupRange) -> bool:
    return task.key_group_start <= key_groups.end and key_groups.start <= task.key_group_end


def advances(plans: Iterable[PartitionPlan], current: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The partitions whose planned point is past their current truncation point, and where to."""
    moved: dict[TopicPartition, int] = {}
    for plan in plans:
        point, tp = plan.point, TopicPartition(plan.topic.name, plan.partition)
        if point is not None and point > current.get(tp, 0):
            moved[tp] = point
    return moved
