"""The one keyed-state backend interface (heap, RocksDB and changelog) and its snapshot type.

Lifecycle: construct with the key-group range this subtask owns -> optionally ``restore``
(once, before any state is registered) -> ``set_current_key`` / ``get_state`` and the handles
-> ``snapshot_async`` (or ``snapshot``, both parts at once) any number of times, each followed by ``notify_checkpoint_complete`` or
``notify_checkpoint_aborted`` (at most once, possibly never) -> ``notify_materialization``
whenever a materialization of this task's state is announced -> ``close`` (afterwards nothing
may be called). Change listeners may be added at any time; they see every mutation made through
the handles, serialized (``KeyedStateChange``); ``apply_change`` replays such a change without
notifying them.

Every backend takes and returns the same :class:`KeyedSnapshot`; an argument a backend does not
need is accepted and ignored, as each implementation documents. The implementations are
registered by name in :mod:`tidemark.state.backend_registry`. Besides states, a backend keeps
timer queues (``timer_queue``), snapshotted, restored and replayed with the states.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import (
    ChangelogRange,
    MaterializationEvent,
    MaterializationRef,
    StateHandle,
    StateHandleKind,
    TaskSnapshot,
)
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.descriptors import StateDescriptor
from tidemark.state.sizes import BackendSize
from tidemark.state.table import ChangeListener, KeyedStateChange
from tidemark.state.timer_queue import TimerQueue
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, KeyGroup, OperatorId, TaskId


class KeyNotInRangeError(ValueError):
    """The current key belongs to a key group this backend does not own."""


class StateRegistrationError(ValueError):
    """A descriptor conflicts with an already registered or restored state of the same name."""


@dataclass(frozen=True, slots=True)
class KeyedSnapshot:
    """One task's keyed state at a checkpoint, as every backend writes and restores it.

    ``handles`` are state files (a full canonical or incremental snapshot; in changelog mode the
    materialized snapshot the state starts from), ``ranges`` the changelog ranges applied on top
    and ``materialization`` the materialization the ranges start after (both empty outside
    changelog mode). Everything counts only for ``key_groups``: a task restored after rescaling
    may carry handles and ranges that also cover other tasks' key groups.
    """

    key_groups: KeyGroupRange
    handles: tuple[StateHandle, ...] = ()
    ranges: tuple[ChangelogRange, ...] = ()
    materialization: MaterializationRef | None = None

    @classmethod
    def from_task_snapshot(cls, task: TaskSnapshot) -> KeyedSnapshot:
        """The keyed part of a task snapshot (operator-state handles restore separately)."""
        keyed = tuple(h for h in task.state_handles if h.kind is not StateHandleKind.OPERATOR)
        return cls(KeyGroupRange(task.key_group_start, task.key_group_end),
                   keyed, tuple(task.changelog_ranges), task.materialization)

    def to_task_snapshot(self, task_id: TaskId, operator_id: OperatorId, subtask_index: int,
                         **fields: Any) -> TaskSnapshot:
        """The wire form (``fields``: operator-state handles are not added; source offsets,
        sink transactions...)."""
        return TaskSnapshot(task_id, operator_id, subtask_index, KeyGroup(self.key_groups.start),
                            KeyGroup(self.key_groups.end), state_handles=self.handles,
                            changelog_ranges=self.ranges, materialization=self.materialization,
                            **fields)


class KeyedStateBackend(ABC):
    """Keyed state of one subtask's key groups; see the module docstring for the lifecycle."""

    # ------------------------------------------------------------------ identity

    @property
    @abstractmethod
    def key_group_range(self) -> KeyGroupRange: ...

    @property
    @abstractmethod
    def max_parallelism(self) -> int: ...

    @property
    @abstractmethod
    def operator_id(self) -> OperatorId: ...

    # ------------------------------------------------------------------ keyed-state API

    @abstractmethod
    def set_current_key(self, key: Any) -> None:
        """Make ``key`` current; ``KeyNotInRangeError`` if its key group is not ours."""

    @abstractmethod
    def get_current_key(self) -> Any: ...

    @property
    @abstractmethod
    def current_key_group(self) -> int: ...

    @abstractmethod
    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle of ``descriptor``'s state, registering it on first use."""

    @abstractmethod
    def registered_states(self) -> list[str]: ...

    @abstractmethod
    def registered_descriptor(self, name: str) -> StateDescriptor | None:
        """The descriptor state ``name`` was registered with (``get_state``), None when no state
        of that name is registered (timer queues are not states)."""

    @abstractmethod
    def timer_queue(self, name: str) -> TimerQueue:
        """The timer queue ``name`` (see :mod:`tidemark.state.timer_queue`), created on first use;
        its canonical form is the reserved state ``_timers.<name>``, in every snapshot."""

    @abstractmethod
    def keys(self, state_name: str) -> Iterator[Any]:
        """Every key holding a value of the registered state ``state_name`` in any namespace, once
        each, in key-group order (Flink's ``getKeys``; TTL is not checked). The current key is
        not changed; do not write the state while iterating."""

    @abstractmethod
    def registration_meta(self, descriptor: StateDescriptor) -> dict[str, Any]:
        """The definition ``descriptor``'s state is (or will be) registered and snapshotted with:
        its meta, with the schema version a migration of its restored state gives it
        (:mod:`tidemark.state.schema_evolution`); raises ``StateMigrationError`` when the restored
        state is incompatible. Registering does not change it."""

    @abstractmethod
    def restore_state_metas(self, metas: list[dict[str, Any]], source: str,
                            key_groups: Sequence[KeyGroupRange] | None = None) -> None:
        """Record the state definitions a restored source writes ``key_groups`` with (all of ours
        when None): a changelog range's state-metadata records, or the header of a snapshot part
        whose entries follow through :meth:`apply_change`. A newer definition (a higher
        ``schema_version``) migrates the state stored so far, the changes of an older one are
        migrated as they are applied; the same version with another definition raises
        :class:`StateRegistrationError`."""

    @abstractmethod
    def cleanup_expired_state(self, limit: int | None = None) -> int:
        """Remove expired TTL values: every one now (``limit`` None), or incrementally, in the
        next ``limit`` stored items from where the last call stopped (a running task calls it
        after each batch and tick, :meth:`tidemark.runtime.worker.task.StageTask.clean_up_expired`);
        returns how many stored items changed."""

    @abstractmethod
    def size(self) -> BackendSize:
        """Entries and bytes of each registered state, as :mod:`tidemark.state.sizes` says each
        backend measures them (cheap: nothing is read again)."""

    # ------------------------------------------------------------------ changes

    @abstractmethod
    def add_change_listener(self, listener: ChangeListener) -> None:
        """Call ``listener`` with every later mutation made through the handles."""

    @abstractmethod
    def remove_change_listener(self, listener: ChangeListener) -> None: ...

    @abstractmethod
    def apply_change(self, change: KeyedStateChange) -> None:
        """Replay a recorded change (recovery); listeners are not notified."""

    # ------------------------------------------------------------------ snapshots

    @abstractmethod
    def snapshot_async(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *,
                       canonical: bool = False) -> AsyncSnapshot[KeyedSnapshot]:
        """The synchronous part of a snapshot of this backend's state at ``checkpoint_id``: it
        captures the state (cheaply: nothing is written to ``storage`` yet where the backend
        can avoid it) and returns the asynchronous part, which writes the files into ``storage``
        on any thread while the handles keep being used (:mod:`tidemark.state.async_snapshot`).
        ``canonical=True`` (savepoints) asks for a self-contained full snapshot in the canonical
        format, which every backend can restore."""

    def snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *,
                 canonical: bool = False) -> KeyedSnapshot:
        """Both parts of :meth:`snapshot_async` at once, on this thread."""
        return self.snapshot_async(checkpoint_id, storage, canonical=canonical).run()

    @abstractmethod
    def restore(self, snapshots: Sequence[KeyedSnapshot], storage: CheckpointStorage) -> None:
        """Load the key groups this backend owns from the snapshots of one checkpoint (one per
        old task; several, overlapping this range, after rescaling). Once, before any state is
        registered."""

    @property
    def rebased(self) -> bool:
        """True when ``restore`` had to write the restored state again as a base of this
        backend's own (changelog mode restoring from files it may not reference)."""
        return False

    def notify_checkpoint_complete(self, checkpoint_id: CheckpointId) -> bool:
        """The checkpoint of an earlier ``snapshot`` completed; True if that changed anything."""
        return False

    def notify_checkpoint_aborted(self, checkpoint_id: CheckpointId) -> bool:
        """The checkpoint of an earlier ``snapshot`` was aborted; True if that changed anything."""
        return False

    def notify_materialization(self, event: MaterializationEvent) -> bool:
        """A materialization of some task's state was announced; True if later snapshots of
        this backend now start from it."""
        return False

    def flush(self) -> None:
        """Make what was written so far durable outside a checkpoint where the backend writes
        anywhere but local memory or disk (the changelog); a checkpoint does this anyway."""

    # ------------------------------------------------------------------ lifecycle

    @abstractmethod
    def close(self) -> None:
        """Release every resource; idempotent."""

    def __enter__(self) -> KeyedStateBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
