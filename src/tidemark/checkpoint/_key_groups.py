"""Flink's key-group range formula, kept private here so the coordinator has no dependency on
the state package (``tidemark.state.keygroups`` implements the same formula for the workers)."""

from __future__ import annotations

from tidemark.types import KeyGroup


def key_group_range(
    max_parallelism: int, parallelism: int, index: int
) -> tuple[KeyGroup, KeyGroup]:
    """Inclusive key-group range of subtask ``index`` (Flink:
    ``computeKeyGroupRangeForOperatorIndex``): ``ceil(i*m/p)`` .. ``ceil((i+1)*m/p) - 1``."""
    if not 0 < parallelism <= max_parallelism:
        raise ValueError(
            f"need 0 < parallelism ({parallelism}) <= max_parallelism ({max_parallelism})"
        )
    if not 0 <= index < parallelism:
        raise ValueError(f"subtask index {index} outside 0..{parallelism - 1}")
    start = -(-index * max_parallelism // parallelism)
    end = -(-(index + 1) * max_parallelism // parallelism) - 1
    return KeyGroup(start), KeyGroup(end)
