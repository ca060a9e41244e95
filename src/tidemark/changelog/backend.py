"""ChangelogStateBackend: a keyed backend whose every mutation is also appended to a changelog.

Lifecycle: construct over a *fresh* keyed backend (heap or RocksDB) and a
:class:`~tidemark.changelog.writer.ChangelogWriter` of the same task attempt -> optionally
``restore`` (once, before any state is registered) -> the keyed-state API (``set_current_key``,
``get_state`` and the handles) -> at each barrier ``snapshot(checkpoint_id)`` -> for each
snapshot, ``notify_checkpoint_complete`` or ``notify_checkpoint_aborted`` -> whenever a
materialization of a completed checkpoint of this task is announced, ``notify_materialized`` ->
``close`` (closes the writer and the wrapped backend).

The wrapped backend's change listener hands each mutation, already serialized, to the writer;
nothing is serialized twice. The first ``get_state`` of a state in this attempt also logs the
state's definition (``writer.append_state_meta``), so whoever rebuilds the state from the
changelog alone (a restore, the materializer) knows its serializers. A snapshot runs no state
snapshot: it persists pending changes and returns ranges plus the handles of the latest
materialization.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.changelog.partitioning import partitions_of
from tidemark.changelog.reader import ChangelogReader
from tidemark.changelog.restore import RestoreResult, plan_handles, restore_from_changelog
from tidemark.changelog.source import ChangelogSource
from tidemark.changelog.writer import ChangelogMark, ChangelogWriter
from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationEvent,
    MaterializationRef,
    MaterializationStatus,
    StateHandle,
    TaskSnapshot,
)
from tidemark.state.backend import KeyedStateBackend, StateRegistrationError
from tidemark.state.descriptors import StateDescriptor
from tidemark.keygroups import KeyGroupRange
from tidemark.state.snapshot import state_meta
from tidemark.state.table import ChangeListener
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, KeyGroup, OperatorId, TaskId


@dataclass(frozen=True, slots=True)
class ChangelogSnapshot:
    """A task's part of a checkpoint in changelog mode: no state files of its own.

    ``handles`` are the materialized snapshot the state starts from (or, until the first
    materialization after a restore, the handles restored from), ``ranges`` the changelog
    ranges applied on top, ``materialization`` the latest materialization of this task.
    """

    checkpoint_id: CheckpointId
    key_groups: KeyGroupRange
    materialization: MaterializationRef | None
    handles: tuple[StateHandle, ...]
    ranges: tuple[ChangelogRange, ...]

    def source(self) -> ChangelogSource:
        """What a restore reads from this snapshot."""
        return ChangelogSource(self.key_groups, self.handles, self.ranges, self.materialization)

    def to_task_snapshot(self, task_id: TaskId, operator_id: OperatorId, subtask_index: int,
                         **fields: Any) -> TaskSnapshot:
        """The wire form (``fields``: source offsets, sink transactions...)."""
        return TaskSnapshot(task_id, operator_id, subtask_index, KeyGroup(self.key_groups.start),
                            KeyGroup(self.key_groups.end), state_handles=self.handles,
                            changelog_ranges=self.ranges, materialization=self.materialization,
                            **fields)


def is_shareable(handles: Sequence[StateHandle]) -> bool:
    """True when every file of ``handles`` is shared, so any number of checkpoints may reference it."""
    return all(f.shared for h in handles for f in h.files)


class ChangelogStateBackend:
    """Keyed state with a changelog; see the module docstring for the lifecycle."""

    def __init__(self, backend: KeyedStateBackend, writer: ChangelogWriter) -> None:
        if writer.max_parallelism != backend.max_parallelism:
            raise ValueError("writer and backend disagree on max_parallelism")
        self.backend = backend
        self.writer = writer
        self._materialization: MaterializationRef | None = None
        self._handles: tuple[StateHandle, ...] = ()
        self._carried: tuple[ChangelogRange, ...] = ()  # restored ranges, until materialized
        self._marks: dict[CheckpointId, ChangelogMark] = {}
        self._logged_states: set[str] = set()
        self._started = False
        self.rebased = False  # restore wrote the restored state as a new shared base
        backend.add_change_listener(self._on_change)

    def _on_change(self, change: Any) -> None:
        self._started = True
        self.writer.append(change)

    # ------------------------------------------------------------------ keyed-state API

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self.backend.key_group_range

    @property
    def max_parallelism(self) -> int:
        return self.backend.max_parallelism

    @property
    def operator_id(self) -> OperatorId:
        return self.backend.operator_id

    @property
    def current_key_group(self) -> int:
        return self.backend.current_key_group

    def set_current_key(self, key: Any) -> None:
        self.backend.set_current_key(key)

    def get_current_key(self) -> Any:
        return self.backend.get_current_key()

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The wrapped backend's handle; the first call per state also logs its definition."""
        self._started = True
        handle = self.backend.get_state(descriptor)
        if descriptor.name not in self._logged_states:
            self.writer.append_state_meta(state_meta(descriptor), self.key_group_range)
            self._logged_states.add(descriptor.name)
        return handle

    def registered_states(self) -> list[str]:
        return self.backend.registered_states()

    def add_change_listener(self, listener: ChangeListener) -> None:
        self.backend.add_change_listener(listener)

    def remove_change_listener(self, listener: ChangeListener) -> None:
        self.backend.remove_change_listener(listener)

    def cleanup_expired_state(self) -> int:
        """TTL cleanup of the wrapped backend; not logged (expired values stay invisible)."""
        return self.backend.cleanup_expired_state()

    # ------------------------------------------------------------------ restore

    def restore(self, sources: Sequence[ChangelogSource], storage: CheckpointStorage,
                reader: ChangelogReader, *, rebase_to: CheckpointStorage | None = None) -> RestoreResult:
        """Restore this task's key groups from the sources of one checkpoint; later snapshots
        carry what was restored until this task's first materialization.

        Checkpoints may only reference snapshot files that are *shared* (reference-counted by the
        checkpoint-store, as materialized snapshots are). When the restored state rests on files
        private to another checkpoint or savepoint (a savepoint is canonical and self-contained;
        a checkpoint taken without changelog owns its files), this task never claims them: the
        restored state is written once more, as shared files, into ``rebase_to`` (a
        :class:`~tidemark.materializer.storage.SharedFilesView` of a folder of its own), and
        later snapshots start from that base with no ranges carried (Flink's NO_CLAIM restore,
        whose first checkpoint is a full one). Without ``rebase_to`` such a restore raises."""
        if self._started:
            raise StateRegistrationError("restore must happen before any state is used")
        self._started = True
        result = restore_from_changelog(self.backend, sources, storage, reader)
        target = self.key_group_range
        native, clipped = plan_handles(sources, target)
        self._handles = tuple(native) + tuple(dict.fromkeys(h for h, _ in clipped))
        self._carried = self._relevant_ranges(sources, target)
        covering = [s for s in sources if len(s.key_groups.intersection(target))]
        if len(covering) == 1 and covering[0].key_groups == target:
            self._materialization = covering[0].materialization
        if not is_shareable(self._handles):
            if rebase_to is None:
                raise ValueError("the restored state rests on files private to another checkpoint or "
                                 "savepoint; restore needs rebase_to storage to write a base of its own")
            self.rebased = True
            self._handles = tuple(self.backend.snapshot(CheckpointId(0), rebase_to))  # its folder is its own
            self._carried, self._materialization = (), None
        return result

    def _relevant_ranges(self, sources: Sequence[ChangelogSource],
                         target: KeyGroupRange) -> tuple[ChangelogRange, ...]:
        w = self.writer
        ranges: dict[ChangelogRange, None] = {}
        for source in sources:
            wanted = set(partitions_of(source.key_groups.intersection(target), w.partitions,
                                       w.max_parallelism))
            ranges.update((r, None) for r in source.ranges if r.partition in wanted)
        return tuple(ranges)

    # ------------------------------------------------------------------ checkpoints

    def snapshot(self, checkpoint_id: CheckpointId) -> ChangelogSnapshot:
        """Persist every pending change (blocking until durable); no state snapshot runs."""
        mark = self.writer.next_sequence_number()
        own = self.writer.persist(mark, checkpoint_id)
        self._marks[checkpoint_id] = mark
        return ChangelogSnapshot(checkpoint_id, self.key_group_range, self._materialization,
                                 self._handles, self._carried + own)

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> bool:
        return self.writer.confirm(checkpoint_id)

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> bool:
        self._marks.pop(checkpoint_id, None)
        return self.writer.reset(checkpoint_id)

    def notify_materialized(self, ref: MaterializationRef, handles: Sequence[StateHandle]) -> bool:
        """A materialization folded this task's changes up to completed checkpoint
        ``ref.checkpoint_id``: later snapshots reference it and their ranges start after that
        checkpoint. False (nothing changes) for a checkpoint this attempt did not take or one
        older than the current materialization; ``ValueError`` if it is not confirmed."""
        mark = self._marks.get(ref.checkpoint_id)
        current = self._materialization
        if mark is None or (current is not None and ref.checkpoint_id <= current.checkpoint_id):
            return False
        self.writer.truncate(mark)
        self._materialization = ref
        self._handles = tuple(handles)
        self._carried = ()
        for older in [c for c in self._marks if c < ref.checkpoint_id]:
            del self._marks[older]
        return True

    def on_materialization_event(self, event: MaterializationEvent) -> bool:
        """:meth:`notify_materialized` for a COMPLETED event about this task.

        The event proves its checkpoint completed (the materializer folds only checkpoints the
        checkpoint-store made durable, which the coordinator then always reports completed), and
        it may arrive before the ``CheckpointCompleted`` on the control topic: a checkpoint this
        attempt took is therefore confirmed first (confirming again later changes nothing).
        """
        if event.status is not MaterializationStatus.COMPLETED or event.task_id != self.writer.task_id:
            return False
        if event.checkpoint_id in self._marks:
            self.writer.confirm(event.checkpoint_id)
        return self.notify_materialized(
            MaterializationRef(event.materialization_id, event.checkpoint_id), event.state_handles)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the writer (flushing) and the wrapped backend; idempotent."""
        try:
            self.writer.close()
        finally:
            self.backend.close()

    def __enter__(self) -> ChangelogStateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
