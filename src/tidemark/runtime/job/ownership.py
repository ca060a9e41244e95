"""Who owns what when a stage runs as several worker processes (pure; no I/O).

A stage of parallelism ``P`` runs as ``W`` worker processes, ``1 <= W <= P``. Worker ``w`` owns
the contiguous block of subtask indexes ``i`` with ``i * W // P == w``; since Flink's key-group
ranges are contiguous in subtask order, a worker's tasks cover one contiguous key-group range.
The supervisor computes the assignment with these functions and records it in the job's
registration (``JobRegistration.workers``), so the coordinator, the workers and the tools agree
on it.

Records reach the worker that owns their key group through Kafka:

* a channel (or a source stage's exchange, :mod:`tidemark.runtime.job.physical_plan`) with ``N``
  partitions is partitioned by key group: key group ``g`` goes to partition ``g * N // max_parallelism``,
  so a worker reads only the partitions its key-group range touches (a partition on the border of
  two workers' ranges is read by both, each keeping the records of its own key groups);
* a source stage's workers divide the input partitions: the ``j``-th of ``M`` partitions (sorted
  by topic, then partition) is read by worker ``j * W // M``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidemark.keygroups import KeyGroupRange, compute_key_group_range
from tidemark.types import TopicPartition


def check_workers(workers: int, parallelism: int, where: str = "workers") -> None:
    if not 1 <= workers <= parallelism:
        raise ValueError(f"{where} must be in 1..parallelism ({parallelism}), got {workers}")


def worker_of(subtask_index: int, parallelism: int, workers: int) -> int:
    """The worker process that owns subtask ``subtask_index``."""
    return subtask_index * workers // parallelism


def subtasks_of(worker: int, parallelism: int, workers: int) -> range:
    """The subtask indexes worker ``worker`` owns (the inverse of :func:`worker_of`)."""
    return range(-(-worker * parallelism // workers), -(-(worker + 1) * parallelism // workers))


def channel_partition(key_group: int, max_parallelism: int, partitions: int) -> int:
    """The partition of a key-group-partitioned channel that carries ``key_group``."""
    return key_group * partitions // max_parallelism


def channel_partitions_of(key_groups: KeyGroupRange, max_parallelism: int, partitions: int) -> list[int]:
    """The partitions of a key-group-partitioned channel that carry any of ``key_groups``."""
    return sorted({channel_partition(group, max_parallelism, partitions) for group in key_groups})


def owned_key_groups(worker: int, parallelism: int, workers: int, max_parallelism: int) -> KeyGroupRange:
    """The contiguous key-group range of worker ``worker``'s subtasks."""
    subtasks = subtasks_of(worker, parallelism, workers)
    return KeyGroupRange(compute_key_group_range(max_parallelism, parallelism, subtasks[0]).start,
                         compute_key_group_range(max_parallelism, parallelism, subtasks[-1]).end)


def co_partitioned_reads(partitions: int, parallelism: int, workers: int, max_parallelism: int) -> list[list[int]] | None:
    """The partitions of a co-partitioned input (key group ``g`` in partition
    :func:`channel_partition`) each worker reads, the partitions of its key groups; None when they
    do not divide among the workers: a partition holding key groups of two workers (or more
    partitions than key groups, some then holding none), which would need two readers with two
    positions in it."""
    if not 1 <= partitions <= max_parallelism:
        return None
    reads = [channel_partitions_of(owned_key_groups(w, parallelism, workers, max_parallelism), max_parallelism,
                                   partitions) for w in range(workers)]
    flat = [p for read in reads for p in read]
    return reads if len(flat) == len(set(flat)) == partitions else None


def input_partitions_of(worker: int, workers: int,
                        partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
    """The input partitions a source stage's worker reads (a share of ``partitions``)."""
    ordered = sorted(partitions)
    return [tp for j, tp in enumerate(ordered) if j * workers // len(ordered) == worker]
