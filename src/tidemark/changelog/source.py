"""What one task snapshot contributes to a changelog restore."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationRef,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.keygroups import KeyGroupRange


@dataclass(frozen=True, slots=True)
class ChangelogSource:
    """The key groups a task owned at a checkpoint, the materialized snapshot its state starts
    from (``handles``) and the changelog ranges applied on top.

    Everything a source holds counts only for ``key_groups``: a task restored after rescaling
    carries handles and ranges of its predecessors that also cover other tasks' key groups,
    and those parts may be stale for key groups that another task has materialized since.
    """

    key_groups: KeyGroupRange
    handles: tuple[StateHandle, ...] = ()
    ranges: tuple[ChangelogRange, ...] = ()
    materialization: MaterializationRef | None = None

    @classmethod
    def from_task_snapshot(cls, task: TaskSnapshot) -> ChangelogSource:
        """The keyed part of a task snapshot (operator-state handles restore separately)."""
        keyed = tuple(h for h in task.state_handles if h.kind is not StateHandleKind.OPERATOR)
        return cls(KeyGroupRange(task.key_group_start, task.key_group_end),
                   keyed, tuple(task.changelog_ranges), task.materialization)
