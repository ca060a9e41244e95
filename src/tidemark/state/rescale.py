"""Which state a new subtask restores after a change of parallelism.

Keyed state: subtask ``i`` of ``p`` owns ``compute_key_group_range(max_p, p, i)`` and restores
every old handle overlapping it, keeping only its own key groups. Operator state follows its
mode: ``SPLIT_DISTRIBUTE`` concatenates every old subtask's list (in old subtask order) and cuts
it into ``p`` contiguous, near-equal chunks (the first ``n % p`` get one more); ``UNION`` gives
everything to everyone; ``BROADCAST`` copies one old instance (all are identical).
"""

from __future__ import annotations

from typing import Sequence, TypeVar

from tidemark.protocol.messages import StateHandle
from tidemark.keygroups import KeyGroupRange, compute_key_group_range
from tidemark.state.restore import overlapping
from tidemark.types import OperatorStateMode

T = TypeVar("T")


def keyed_handles_for_subtask(
    handles: Sequence[StateHandle], max_parallelism: int, parallelism: int, subtask_index: int
) -> tuple[KeyGroupRange, list[StateHandle]]:
    """The key groups of a new subtask and the old handles it must read."""
    key_groups = compute_key_group_range(max_parallelism, parallelism, subtask_index)
    return key_groups, overlapping(handles, key_groups)


def split_evenly(items: Sequence[T], parallelism: int, subtask_index: int) -> list[T]:
    """Subtask ``subtask_index``'s contiguous share of ``items`` (Flink's round-robin split)."""
    if not 0 <= subtask_index < parallelism:
        raise ValueError(f"subtask index {subtask_index} not in [0, {parallelism})")
    base, extra = divmod(len(items), parallelism)
    start = subtask_index * base + min(subtask_index, extra)
    return list(items[start : start + base + (1 if subtask_index < extra else 0)])


def redistribute_list(
    old_lists: Sequence[Sequence[T]], mode: OperatorStateMode, parallelism: int, subtask_index: int
) -> list[T]:
    """What subtask ``subtask_index`` of ``parallelism`` gets from the old subtasks' lists."""
    if mode is OperatorStateMode.UNION:
        return [item for old in old_lists for item in old]
    if mode is OperatorStateMode.BROADCAST:
        return list(old_lists[subtask_index % len(old_lists)]) if old_lists else []
    if len(old_lists) == parallelism:  # unchanged parallelism keeps each subtask's own list
        return list(old_lists[subtask_index])
    return split_evenly([item for old in old_lists for item in old], parallelism, subtask_index)
