"""The template of the backends that keep state in this process: heap and RocksDB.

:class:`LocalKeyedStateBackend` does the current-key bookkeeping (key group, stored key, a cache
of both), state registration checked against restored definitions, timer queues (created on
first use, their canonical state definitions in every snapshot), change listeners and the
canonical full snapshot; a subclass stores the tables (``_create_table``) and the timer queues
(``_create_timer_queue``), replays changes (``_apply_change``), snapshots, restores and closes.
The lifecycle is :class:`~tidemark.state.backend.KeyedStateBackend`'s.
"""

from __future__ import annotations

import io
from abc import abstractmethod
from typing import Any, Iterable, Iterator, Sequence

from tidemark.chassis.logs import get_logger
from tidemark.keygroups import (
    KEY_TAGS,
    KeyGroupRange,
    check_max_parallelism,
    hash_key_bytes,
    key_to_bytes,
)
from tidemark.protocol.messages import StateChangeOp, StateFile, StateHandle, StateHandleKind
from tidemark.state.backend import (
    KeyedSnapshot,
    KeyedStateBackend,
    KeyNotInRangeError,
    StateRegistrationError,
)
from tidemark.state.descriptors import StateDescriptor, StateKind
from tidemark.state.handles import (
    AggregatingState,
    ListState,
    MapState,
    ReducingState,
    State,
    ValueState,
)
from tidemark.state.restore import overlapping
from tidemark.state.schema_evolution import (
    Compatibility,
    Migration,
    check_registration,
    element_migration,
    resolve_state,
    schema_version,
    with_schema_version,
)
from tidemark.state.snapshot import CHUNK, ChunkReader, Entry, snapshot_chunks, state_meta
from tidemark.state.table import ChangeListener, KeyedStateChange, StateTable
from tidemark.state.timer_queue import (
    TimerQueue,
    is_timer_state,
    queue_name_of,
    timer_state_descriptor,
    timer_state_name,
)
from tidemark.state.ttl import Clock, SystemClock
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, KeyGroup, OperatorId

log = get_logger(__name__)

HANDLE_TYPES: dict[StateKind, type[State]] = {
    StateKind.VALUE: ValueState,
    StateKind.LIST: ListState,
    StateKind.MAP: MapState,
    StateKind.REDUCING: ReducingState,
    StateKind.AGGREGATING: AggregatingState,
}

# keys whose context (key group, stored bytes) a backend keeps, cleared when full: about 270 bytes
# each, per task, so a worker's memory grows with its tasks by this much (1 << 16 was 17 MiB a task,
# more than RocksDB's whole shared budget at 8 tasks; bench/bench_rocksdb_memory.py)
_KEY_CACHE_SIZE = 1 << 14


class LocalKeyedStateBackend(KeyedStateBackend):
    """Current-key bookkeeping, state registration and listeners; storage is the subclass's."""

    def __init__(
        self,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        *,
        operator_id: str = "operator",
        clock: Clock | None = None,
    ) -> None:
        check_max_parallelism(max_parallelism)
        if key_group_range.end >= max_parallelism:
            raise ValueError(f"{key_group_range} exceeds max_parallelism {max_parallelism}")
        self._key_group_range = key_group_range
        self._max_parallelism = max_parallelism
        self._operator_id = OperatorId(operator_id)
        self.clock: Clock = clock or SystemClock()
        self._start = key_group_range.start
        self._key: Any = None
        self._key_group = -1
        self._kgi = -1
        self._stored_key = b""
        self._key_cache: dict[Any, tuple[Any, ...]] = {}
        self._states: dict[str, State] = {}
        self._timer_queues: dict[str, TimerQueue] = {}
        self._timer_queues_by_state: dict[str, TimerQueue] = {}  # by the name of their canonical state
        self._restored_meta: dict[str, dict[str, Any]] = {}
        self._schema_versions: dict[str, int] = {}  # of registered states migrated at least once
        # per restored state: the definition each source's key groups were written with (newest
        # last), and the migrations from the older ones to the stored one
        self._sources: dict[str, list[tuple[tuple[KeyGroupRange, ...], dict[str, Any]]]] = {}
        self._evolving: set[str] = set()  # restored states met with more than one definition
        self._migrations: dict[tuple[str, int, int, bool], Migration] = {}
        self._listeners: list[ChangeListener] = []
        self._closed = False

    @property
    def key_group_range(self) -> KeyGroupRange:
        return self._key_group_range

    @property
    def max_parallelism(self) -> int:
        return self._max_parallelism

    @property
    def operator_id(self) -> OperatorId:
        return self._operator_id

    # ------------------------------------------------------------------ current key

    def _merge_metas(self, metas: list[dict[str, Any]], source: str,
                     key_groups: Sequence[KeyGroupRange] | None = None) -> None:
        """Record the definitions a restored source (a snapshot part, or a changelog range from
        one of its state-metadata records on) writes ``key_groups`` (all of ours when None) with.
        Another definition of a known state is a schema evolution
        (:mod:`tidemark.state.schema_evolution`): a newer one migrates what is stored so far; the
        changes of a source with an older one are migrated as they are applied (:meth:`_forwarded`)."""
        ranges = tuple(key_groups) if key_groups is not None else (self.key_group_range,)
        for meta in metas:
            name = meta["name"]
            known = self._restored_meta.setdefault(name, meta)
            if known != meta:
                self._evolve(name, known, meta, source)
            sources = self._sources.setdefault(name, [])
            sources[:] = [(r, m) for r, m in sources if r != ranges] + [(ranges, meta)]

    def _evolve(self, name: str, known: dict[str, Any], meta: dict[str, Any], source: str) -> None:
        ours, theirs = schema_version(known), schema_version(meta)
        older, newer = (known, meta) if theirs >= ours else (meta, known)
        resolution = resolve_state(older, newer)
        if resolution.compatibility is Compatibility.AS_IS:  # the same bytes (another TTL, say): the newest wins
            if theirs >= ours:
                self._restored_meta[name] = meta
            return
        if ours == theirs or name in self._states:
            raise StateRegistrationError(f"{source}: state {name!r} was written with a different definition "
                                         f"({resolution.reason or 'at the same schema version'})")
        check_registration(name, resolution)
        self._evolving.add(name)
        if newer is meta:  # the stored bytes move forward
            self._migrate(name, resolution.migrate)  # type: ignore[arg-type]
            self._restored_meta[name] = meta

    def _forwarded(self, change: KeyedStateChange) -> KeyedStateChange:
        """``change`` of a restored source, its value migrated to the stored definition when the
        source wrote it with an older one (see :meth:`_merge_metas`)."""
        if change.state_name not in self._evolving or change.value is None:
            return change
        migrate = self._source_migration(change.state_name, change.key_group, element=change.op is StateChangeOp.ADD)
        if migrate is None:
            return change
        return KeyedStateChange(change.state_name, change.key_group, change.key, change.namespace, change.op,
                                change.user_key, migrate(change.value))

    def _source_migration(self, name: str, key_group: int, *, element: bool) -> Migration | None:
        """How a value of state ``name`` in ``key_group`` from the source being restored is
        migrated to the stored definition (None: it is written with it); ``element``: a list's
        element (an ``ADD``) rather than a stored value."""
        written = next((meta for ranges, meta in reversed(self._sources[name]) if any(key_group in r for r in ranges)),
                       None)
        stored = self._restored_meta[name]
        if written is None or schema_version(written) == schema_version(stored):
            return None
        cache_key = (name, schema_version(written), schema_version(stored), element)
        migrate = self._migrations.get(cache_key)
        if migrate is None:
            resolution = resolve_state(written, stored)
            check_registration(name, resolution)
            migrate = resolution.migrate or (lambda data: data)
            self._migrations[cache_key] = migrate = element_migration(migrate) if element else migrate
        return migrate

    def _migrate(self, name: str, migrate: Migration) -> None:
        """Rewrite every stored value of state ``name`` with ``migrate``."""
        count = self._migrate_stored(name, migrate)
        log.info("state migrated to its new schema", operator=self.operator_id, state=name, values=count)

    def set_current_key(self, key: Any) -> None:
        """Make ``key`` current; ``KeyNotInRangeError`` if its key group is not ours."""
        ctx = self._key_cache.get(key)
        if ctx is None or ctx[0] is not type(key):
            ctx = self._key_context(key)
        self._key = key
        self._key_group = ctx[1]
        self._kgi = ctx[2]
        self._stored_key = ctx[3]
        self._on_key_context(ctx)

    def _key_context(self, key: Any) -> tuple[Any, ...]:
        key_bytes = key_to_bytes(key)
        key_group = hash_key_bytes(key_bytes) % self.max_parallelism
        if key_group not in self.key_group_range:
            raise KeyNotInRangeError(
                f"key {key!r} is in key group {key_group}, outside {self.key_group_range}"
            )
        ctx = (type(key), key_group, key_group - self._start, KEY_TAGS[type(key)] + key_bytes)
        ctx = ctx + self._extra_key_context(ctx)
        if len(self._key_cache) >= _KEY_CACHE_SIZE:
            self._key_cache.clear()
        self._key_cache[key] = ctx
        return ctx

    def _extra_key_context(self, ctx: tuple[Any, ...]) -> tuple[Any, ...]:
        """Backend-specific values derived once per key (e.g. a RocksDB key prefix)."""
        return ()

    def _on_key_context(self, ctx: tuple[Any, ...]) -> None:
        """Hook called on every ``set_current_key`` with the cached context."""

    def get_current_key(self) -> Any:
        return self._key

    @property
    def current_key_group(self) -> int:
        return self._key_group

    # ------------------------------------------------------------------ registration

    def get_state(self, descriptor: StateDescriptor) -> Any:
        """The handle of ``descriptor``'s state, registering it on first use."""
        self._check_open()
        existing = self._states.get(descriptor.name)
        if existing is not None:
            if existing.descriptor.kind is not descriptor.kind:
                raise StateRegistrationError(
                    f"state {descriptor.name!r} is a {existing.descriptor.kind.value} state"
                )
            return existing
        if is_timer_state(descriptor.name):
            raise StateRegistrationError(f"state {descriptor.name!r}: the names _timers.* are "
                                         "reserved for timer queues (timer_queue)")
        self._check_restored(descriptor)
        table = self._create_table(descriptor)
        handle = HANDLE_TYPES[descriptor.kind](table, descriptor, self.clock)
        self._states[descriptor.name] = handle
        return handle

    def registration_meta(self, descriptor: StateDescriptor) -> dict[str, Any]:
        return self._resolved(descriptor)[0]

    def _resolved(self, descriptor: StateDescriptor) -> tuple[dict[str, Any], Migration | None]:
        """The definition ``descriptor``'s state is registered with, and the migration of its
        restored values (None: none restored, or readable as they are); an incompatible restored
        definition raises ``StateMigrationError``."""
        meta = state_meta(descriptor)
        restored = self._restored_meta.get(descriptor.name)
        if restored is None:
            return with_schema_version(meta, self._schema_versions.get(descriptor.name, 0)), None
        resolution = resolve_state(restored, meta)
        check_registration(descriptor.name, resolution)
        return with_schema_version(meta, schema_version(restored) + (resolution.migrate is not None)), resolution.migrate

    def _check_restored(self, descriptor: StateDescriptor) -> None:
        """Resolve the restored definition of ``descriptor``'s state, if any, against it: an
        incompatible one raises ``StateMigrationError``; one compatible after migration is
        migrated now, before the table reads it."""
        if descriptor.name not in self._restored_meta:
            return
        meta, migrate = self._resolved(descriptor)
        if migrate is not None:
            self._migrate(descriptor.name, migrate)
        self._restored_meta[descriptor.name] = meta
        self._sources.pop(descriptor.name, None)
        self._evolving.discard(descriptor.name)
        if schema_version(meta):
            self._schema_versions[descriptor.name] = schema_version(meta)

    def timer_queue(self, name: str) -> TimerQueue:
        """The timer queue ``name``, created on first use (its definition checked against a
        restored one, as a state's is)."""
        self._check_open()
        queue = self._timer_queues.get(name)
        if queue is None:
            self._check_restored(timer_state_descriptor(name))
            queue = self._timer_queues[name] = self._create_timer_queue(name)
        return queue

    def _timer_queue_of(self, change: KeyedStateChange) -> TimerQueue | None:
        """The queue a change of a timer state replays into (None for any other state)."""
        queue = self._timer_queues_by_state.get(change.state_name)
        if queue is None and is_timer_state(change.state_name):
            queue = self._timer_queues_by_state[change.state_name] = self.timer_queue(
                queue_name_of(change.state_name))
        return queue

    def keys(self, state_name: str) -> Iterator[Any]:
        if state_name not in self._states:
            raise KeyError(f"state {state_name!r} is not registered")
        return self._table_of(state_name).stored_keys()

    def registered_states(self) -> list[str]:
        return sorted(self._states)

    def registered_descriptor(self, name: str) -> StateDescriptor | None:
        handle = self._states.get(name)
        return None if handle is None else handle.descriptor

    def restore_state_metas(self, metas: list[dict[str, Any]], source: str,
                            key_groups: Sequence[KeyGroupRange] | None = None) -> None:
        """Record state definitions read outside a snapshot, as restored snapshot headers are
        (see :meth:`_merge_metas`). Registering such a state later is checked against them."""
        self._check_open()
        self._merge_metas(metas, source, key_groups)

    def _state_metas(self) -> list[dict[str, Any]]:
        """Metas of registered states and timer queues, plus restored ones not registered yet."""
        metas = {name: with_schema_version(state_meta(h.descriptor), self._schema_versions.get(name, 0))
                 for name, h in self._states.items()}
        for queue_name in self._timer_queues:
            metas[timer_state_name(queue_name)] = state_meta(timer_state_descriptor(queue_name))
        for name, meta in self._restored_meta.items():
            metas.setdefault(name, meta)
        return [metas[name] for name in sorted(metas)]

    # ------------------------------------------------------------------ changes

    def add_change_listener(self, listener: ChangeListener) -> None:
        """Call ``listener`` with every later mutation made through the handles."""
        self._listeners.append(listener)

    def remove_change_listener(self, listener: ChangeListener) -> None:
        self._listeners.remove(listener)

    def apply_change(self, change: KeyedStateChange) -> None:
        """Replay a recorded change (recovery); listeners are not notified."""
        self._check_open()
        if change.key_group not in self.key_group_range:
            raise KeyNotInRangeError(f"change for key group {change.key_group} outside range")
        self._apply_change(self._forwarded(change) if self._evolving else change)

    # ------------------------------------------------------------------ lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Release every resource; idempotent."""
        if not self._closed:
            self._closed = True
            self._close()

    def _snapshot_path(self, checkpoint_id: int, suffix: str) -> str:
        kgr = self.key_group_range
        return f"{self.operator_id}/chk-{checkpoint_id}/kg-{kgr.start}-{kgr.end}{suffix}"

    def _keyed_snapshot(self, kind: StateHandleKind, files: tuple[StateFile, ...], size: int,
                        written: int) -> KeyedSnapshot:
        kgr = self.key_group_range
        return KeyedSnapshot(kgr, (StateHandle(kind, self.operator_id, KeyGroup(kgr.start),
                                               KeyGroup(kgr.end), files, size, written),))

    def _full_snapshot(self, checkpoint_id: CheckpointId, storage: CheckpointStorage,
                       header: dict[str, Any], metas: list[dict[str, Any]],
                       entries: Iterable[Entry]) -> KeyedSnapshot:
        """Write a full snapshot in the canonical format (one file), streamed."""
        with io.BufferedReader(ChunkReader(snapshot_chunks(header, metas, entries)), CHUNK) as data:
            ref = storage.write_from(self._snapshot_path(int(checkpoint_id), ".tmks"), data)
        return self._keyed_snapshot(StateHandleKind.KEYED_FULL, (ref,), ref.size_bytes, ref.size_bytes)

    def _header(self, checkpoint_id: CheckpointId, backend: str) -> dict[str, Any]:
        return {
            "checkpoint_id": int(checkpoint_id),
            "max_parallelism": self.max_parallelism,
            "key_group_start": self.key_group_range.start,
            "key_group_end": self.key_group_range.end,
            "backend": backend,
        }

    def _handles_to_restore(self, snapshots: Sequence[KeyedSnapshot]) -> list[StateHandle]:
        """The handles of ``snapshots`` overlapping our key groups (each once). Changelog ranges
        are the changelog backend's to replay; a local backend restores the files only."""
        self._check_open()
        if self._states or self._timer_queues:
            raise StateRegistrationError("restore must happen before any state is registered")
        handles = dict.fromkeys(h for s in snapshots for h in s.handles)
        return overlapping(list(handles), self.key_group_range)

    # ------------------------------------------------------------------ subclass contract

    @abstractmethod
    def _create_table(self, descriptor: StateDescriptor) -> StateTable: ...

    @abstractmethod
    def _create_timer_queue(self, name: str) -> TimerQueue: ...

    @abstractmethod
    def _table_of(self, state_name: str) -> StateTable:
        """The table of a registered state."""

    @abstractmethod
    def _apply_change(self, change: KeyedStateChange) -> None: ...

    @abstractmethod
    def _migrate_stored(self, name: str, migrate: Migration) -> int:
        """Rewrite each stored value of the not-yet-registered state ``name`` with ``migrate``;
        how many were rewritten."""

    @abstractmethod
    def _close(self) -> None: ...

    @abstractmethod
    def canonical_state(self) -> tuple[list[dict[str, Any]], Iterator[Entry]]:
        """Every state's definition and the entries a canonical snapshot taken now would hold
        (expired TTL values left out), read where the backend keeps them, nothing written: the
        entries stream from the live tables, so take them all before changing or closing the
        backend. A RocksDB backend holds no more in memory than its own budget while they are
        read; a heap backend's state is in memory already."""
