"""ChangelogStateBackend: a keyed backend whose every mutation is also appended to a changelog.

Lifecycle (:class:`~tidemark.state.backend.KeyedStateBackend`'s): construct over a *fresh* keyed
backend (heap or RocksDB) and a changelog writer of the same task attempt (plus the reader a
restore reads ranges with and the storage a rebase writes to, see ``restore``) -> optionally
``restore`` (once, before any state is used) -> the keyed-state API -> at each barrier
``snapshot`` -> for each snapshot, ``notify_checkpoint_complete`` or ``notify_checkpoint_aborted``
-> whenever a materialization of a completed checkpoint of this task is announced,
``notify_materialization`` -> ``close`` (closes the writer and the wrapped backend).

The wrapped backend's change listener hands each mutation, already serialized, to the writer;
nothing is serialized twice. Timer queues are the wrapped backend's: their changes reach the
writer the same way, in the queues' canonical form (the map states ``_timers.<name>``), so a
restore from the changelog brings the timers back. The first ``get_state`` of a state (or
``timer_queue`` of a queue) in this attempt also logs the state's definition (``writer.append_state_meta``), so whoever rebuilds the state from the
changelog alone (a restore, the materializer) knows its serializers. A checkpoint runs no state
snapshot: it persists pending changes and returns ranges plus the handles of the latest
materialization (see :mod:`tidemark.changelog.backend.restore`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.changelog.partitioning import partitions_of
from tidemark.changelog.reader import ChangelogReader
from tidemark.changelog.writer import ChangelogMark, StateChangelogWriter
from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationEvent,
    MaterializationRef,
    MaterializationStatus,
    StateHandle,
)
from tidemark.state.sizes import BackendSize
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.backend import KeyedSnapshot, KeyedStateBackend, StateRegistrationError
from tidemark.changelog.backend.restore import (
    RestoreResult,
    is_shareable,
    plan_handles,
    restore_from_changelog,
)
from tidemark.state.descriptors import StateDescriptor
from tidemark.state.table import ChangeListener, KeyedStateChange
from tidemark.state.timer_queue import TimerQueue, timer_state_descriptor
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, OperatorId


@dataclass(frozen=True)
class ChangelogWiring:
    """What the registry's changelog wrapper needs besides the backend it wraps: the task
    attempt's writer, the reader a restore reads ranges with, and where a restore that must
    rebase writes the new base (``None``: such a restore raises)."""

    writer: StateChangelogWriter
    reader: ChangelogReader | None = None
    rebase_to: CheckpointStorage | None = None


class ChangelogStateBackend(KeyedStateBackend):
    """Keyed state with a changelog; see the module docstring for the lifecycle."""

    def __init__(self, backend: KeyedStateBackend, writer: StateChangelogWriter,
                 reader: ChangelogReader | None = None, rebase_to: CheckpointStorage | None = None) -> None:
        if writer.max_parallelism != backend.max_parallelism:
            raise ValueError("writer and backend disagree on max_parallelism")
        self.backend = backend
        self.writer = writer
        self.reader = reader
        self.rebase_to = rebase_to
        self.last_restore: RestoreResult | None = None
        self._materialization: MaterializationRef | None = None
        self._handles: tuple[StateHandle, ...] = ()
        self._carried: tuple[ChangelogRange, ...] = ()  # restored ranges, until materialized
        self._marks: dict[CheckpointId, ChangelogMark] = {}
        self._logged_states: set[str] = set()
        self._started = False
        self._rebased = False
        backend.add_change_listener(self._on_change)

    @classmethod
    def wrap(cls, backend: KeyedStateBackend, wiring: ChangelogWiring) -> ChangelogStateBackend:
        """The registry's wrapper (see :mod:`tidemark.state.backend_registry`)."""
        return cls(backend, wiring.writer, wiring.reader, wiring.rebase_to)

    def _on_change(self, change: KeyedStateChange) -> None:
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
        if descriptor.name not in self._logged_states:  # before a migration's rewritten values
            self.writer.append_state_meta(self.backend.registration_meta(descriptor), self.key_group_range)
            self._logged_states.add(descriptor.name)
        return self.backend.get_state(descriptor)

    def registered_states(self) -> list[str]:
        return self.backend.registered_states()

    def registered_descriptor(self, name: str) -> StateDescriptor | None:
        return self.backend.registered_descriptor(name)

    def timer_queue(self, name: str) -> TimerQueue:
        """The wrapped backend's queue (its changes are logged through the change listener);
        the first call per queue also logs the definition of its canonical state."""
        self._started = True
        queue = self.backend.timer_queue(name)
        descriptor = timer_state_descriptor(name)
        if descriptor.name not in self._logged_states:
            self.writer.append_state_meta(self.backend.registration_meta(descriptor), self.key_group_range)
            self._logged_states.add(descriptor.name)
        return queue

    def keys(self, state_name: str) -> Iterator[Any]:
        return self.backend.keys(state_name)

    def registration_meta(self, descriptor: StateDescriptor) -> dict[str, Any]:
        return self.backend.registration_meta(descriptor)

    def restore_state_metas(self, metas: list[dict[str, Any]], source: str,
                            key_groups: Sequence[KeyGroupRange] | None = None) -> None:
        self.backend.restore_state_metas(metas, source, key_groups)

    def add_change_listener(self, listener: ChangeListener) -> None:
        self.backend.add_change_listener(listener)

    def remove_change_listener(self, listener: ChangeListener) -> None:
        self.backend.remove_change_listener(listener)

    def apply_change(self, change: KeyedStateChange) -> None:
        """Replay ``change`` into the wrapped backend and append it to the changelog, so that
        the state stays what the changelog rebuilds; other listeners are not notified."""
        self.backend.apply_change(change)
        self._on_change(change)

    def cleanup_expired_state(self, limit: int | None = None) -> int:
        """TTL cleanup of the wrapped backend, logged: its changes reach :meth:`_on_change` as
        every write's do, so the changelog replays to the cleaned state."""
        return self.backend.cleanup_expired_state(limit)

    def size(self) -> BackendSize:
        """The wrapped backend's."""
        return self.backend.size()

    # ------------------------------------------------------------------ restore

    def restore(self, snapshots: Sequence[KeyedSnapshot], storage: CheckpointStorage) -> None:
        """Restore this task's key groups from the snapshots of one checkpoint (materialized
        handles, then exactly the recorded ranges, read with ``reader``); later snapshots carry
        what was restored until this task's first materialization. The result's statistics are
        kept in ``last_restore``.

        Checkpoints may only reference snapshot files that are *shared* (reference-counted by the
        checkpoint-store, as materialized snapshots are). When the restored state rests on files
        private to another checkpoint or savepoint (a savepoint is canonical and self-contained;
        a checkpoint taken without changelog owns its files), this task never claims them: the
        restored state is written once more, as shared files, into ``rebase_to`` (a
        :class:`~tidemark.materializer.storage.SharedFilesView` of a folder of its own), and
        later snapshots start from that base with no ranges carried (Flink's NO_CLAIM restore,
        whose first checkpoint is a full one; ``rebased`` is then True). Without ``rebase_to``
        such a restore raises ``ValueError``."""
        if self._started:
            raise StateRegistrationError("restore must happen before any state is used")
        if self.reader is None:
            raise ValueError("a changelog backend restores only with a changelog reader")
        self._started = True
        self.last_restore = restore_from_changelog(self.backend, snapshots, storage, self.reader)
        target = self.key_group_range
        native, clipped = plan_handles(snapshots, target)
        self._handles = tuple(native) + tuple(dict.fromkeys(h for h, _ in clipped))
        self._carried = self._relevant_ranges(snapshots, target)
        covering = [s for s in snapshots if len(s.key_groups.intersection(target))]
        if len(covering) == 1 and covering[0].key_groups == target:
            self._materialization = covering[0].materialization
        if not is_shareable(self._handles):
            if self.rebase_to is None:
                raise ValueError("the restored state rests on files private to another checkpoint or "
                                 "savepoint; restore needs rebase_to storage to write a base of its own")
            self._rebased = True
            base = self.backend.snapshot(CheckpointId(0), self.rebase_to)  # its folder is its own
            self._handles, self._carried, self._materialization = base.handles, (), None

    @property
    def rebased(self) -> bool:
        return self._rebased

    def _relevant_ranges(self, snapshots: Sequence[KeyedSnapshot],
                         target: KeyGroupRange) -> tuple[ChangelogRange, ...]:
        w = self.writer
        ranges: dict[ChangelogRange, None] = {}
        for snapshot in snapshots:
            wanted = set(partitions_of(snapshot.key_groups.intersection(target), w.partitions,
                                       w.max_parallelism))
            ranges.update((r, None) for r in snapshot.ranges if r.partition in wanted)
        return tuple(ranges)

    # ------------------------------------------------------------------ checkpoints

    def snapshot_async(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *,
                       canonical: bool = False) -> AsyncSnapshot[KeyedSnapshot]:
        """A checkpoint persists every pending change (in the synchronous part: it waits until
        the changes streamed so far are durable) and writes nothing into ``storage``; a
        savepoint (``canonical``) is a full canonical snapshot of the wrapped backend (its own
        two parts), self-contained, with no ranges."""
        if canonical:
            return self.backend.snapshot_async(checkpoint_id, storage, canonical=True)
        mark = self.writer.next_sequence_number()
        own = self.writer.persist(mark, checkpoint_id)
        self._marks[checkpoint_id] = mark
        return AsyncSnapshot.done(KeyedSnapshot(self.key_group_range, self._handles, self._carried + own,
                                                self._materialization))

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

    def notify_materialization(self, event: MaterializationEvent) -> bool:
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

    def flush(self) -> None:
        """Wait until every change appended so far is delivered to the changelog."""
        self.writer.flush()

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close the writer (flushing) and the wrapped backend; idempotent."""
        try:
            self.writer.close()
        finally:
            self.backend.close()
