"""RocksDBStateBackend: keyed state in an embedded RocksDB (rocksdict), one column family per
state, every key prefixed by its key group; timers in column families of their own, ordered by
time (:mod:`tidemark.state.rocksdb.timers`).

The database under ``<path>/db`` is a working copy: it is created empty, written without WAL
(recovery always starts from a checkpoint, never from the local files) and deleted on close.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import rocksdict

from tidemark.keygroups import KeyGroupRange
from tidemark.protocol.messages import StateChangeOp, StateFile, StateHandle, StateHandleKind
from tidemark.state.sizes import BackendSize, StateSize
from tidemark.state.async_snapshot import AsyncSnapshot
from tidemark.state.backend import KeyedSnapshot, StateRegistrationError
from tidemark.state.descriptors import StateDescriptor, StateKind
from tidemark.state.local_backend import LocalKeyedStateBackend
from tidemark.state.restore import handle_key_groups, read_handle
from tidemark.state.schema_evolution import Migration
from tidemark.state.rocksdb.capture import Capture, Family
from tidemark.state.rocksdb.options import OptionsFactory, RocksDBMemory, RocksDBOptions, RocksDBResources
from tidemark.state.rocksdb.snapshot import (
    CF_PREFIX,
    SnapshotStats,
    create_local_checkpoint,
    download,
    iter_column_family,
    open_db,
    read_states,
    scan_options,
    upload_incremental,
)
from tidemark.state.rocksdb.table import (
    RocksListTable,
    RocksMapTable,
    RocksStateTable,
    RocksValueTable,
    key_group_bytes,
    key_prefix,
    namespace_part,
    split_db_key,
    successor,
)
from tidemark.state.serializers import frame_element, frame_elements, unframe_elements
from tidemark.state.snapshot import Entry
from tidemark.state.table import ChangeListener, KeyedStateChange
from tidemark.state.timer_queue import is_timer_state, queue_name_of, timer_state_name
from tidemark.state.rocksdb.timers import (
    COUNTS_CF,
    LEGACY_TIME_ORDER_CF_PREFIX,
    TIME_ORDER_CF_PREFIX,
    RocksDBTimerQueue,
    rebuild_time_order,
    time_order_cf_name,
)
from tidemark.state.ttl import Clock, is_expired, timestamp_of
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId

_MARKER = ".tidemark-rocksdb"
# A restore writes its entries in write batches of about this many bytes: a batch is held whole
# in memory (and its allocation may stay in the process's heap after it), so a batch of a fixed
# number of entries would grow the restoring process with the size of the values.
_BATCH_BYTES = 1 << 20


class RocksDBStateBackend(LocalKeyedStateBackend):
    """Keyed state in RocksDB; see :class:`KeyedStateBackend` for the lifecycle."""

    def __init__(
        self,
        path: str | Path,
        key_group_range: KeyGroupRange,
        max_parallelism: int,
        *,
        options: RocksDBOptions = RocksDBOptions(),
        operator_id: str = "operator",
        clock: Clock | None = None,
        memory: RocksDBMemory | None = None,
        options_factory: OptionsFactory | None = None,
    ) -> None:
        """``memory``: a budget shared with other databases (else its own, from ``options``);
        ``options_factory``: changes each state's column-family options (``rocksdb.options``)."""
        super().__init__(key_group_range, max_parallelism, operator_id=operator_id, clock=clock)
        self.path = Path(path)
        self.options = options
        self._db_path = self.path / "db"
        self._resources = RocksDBResources(options, memory, options_factory)
        self._prefix = b""
        self._tables: dict[str, RocksStateTable] = {}
        self._cleanup_at: tuple[int, bytes | None] = (0, None)  # where the incremental TTL cleanup goes on
        self._cfs: dict[str, Family] = {}  # by state name
        self._timer_cfs: dict[str, Family] = {}  # by column-family name
        self._capture: Capture | None = None  # the last snapshot's, while open
        self._rocks_timers: dict[str, RocksDBTimerQueue] = {}
        self._uploaded: dict[str, StateFile] = {}
        self.last_snapshot_stats: SnapshotStats | None = None
        self._claim_directory()
        self._db = self._open()

    # ------------------------------------------------------------------ database

    def _claim_directory(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        marker = self.path / _MARKER
        if self._db_path.exists():
            if not marker.exists():
                raise FileExistsError(f"{self._db_path} exists and is not a Tidemark working copy")
            shutil.rmtree(self._db_path)
        marker.touch()

    def _open(self) -> rocksdict.Rdict:
        db = open_db(self._db_path, self._resources.db_options(), self._family_options)
        db.set_write_options(self._resources.write_options())
        return db

    def _cf(self, state_name: str) -> Family:
        cf = self._cfs.get(state_name)
        if cf is None:
            cf = self._cfs[state_name] = self._column_family(CF_PREFIX + state_name)
        return cf

    def _timer_cf(self, name: str) -> Family:
        """A timer column family (time-ordered queue or counts) by its name."""
        cf = self._timer_cfs.get(name)
        if cf is None:
            cf = self._timer_cfs[name] = self._column_family(name)
        return cf

    def _family_options(self, name: str) -> rocksdict.Options:
        """A column family's options: a state's get what the job's options factory changes."""
        return self._resources.db_options(name[len(CF_PREFIX):] if name.startswith(CF_PREFIX) else None)

    def _column_family(self, name: str) -> Family:
        try:
            cf = self._db.get_column_family(name)
        except Exception:
            cf = self._db.create_column_family(name, self._family_options(name))
        cf.set_write_options(self._resources.write_options())
        family = Family(cf, name)
        if self._capture is not None:
            self._capture.add(family)
        return family

    def _write_pending(self) -> None:
        """The value tables' write buffers into the database (:class:`RocksValueTable`): before
        anything reads it other than through a table's ``get``."""
        for table in self._tables.values():
            table.write_pending()

    def _end_capture(self) -> None:
        """Before the database changes other than by the processing thread's writes (a restore,
        a migration, the close) or the next snapshot: the write buffers written (an open
        capture keeps what they replace), then the open capture's checkpoint taken now."""
        self._write_pending()
        capture, self._capture = self._capture, None
        if capture is not None and capture.is_open:
            try:
                capture.take()
            except Exception:  # raised again by its own snapshot's asynchronous part
                pass

    # ------------------------------------------------------------------ key context

    def _extra_key_context(self, ctx: tuple[Any, ...]) -> tuple[Any, ...]:
        return (key_prefix(ctx[1], ctx[3]),)

    def _on_key_context(self, ctx: tuple[Any, ...]) -> None:
        self._prefix = ctx[4]

    def _create_table(self, descriptor: StateDescriptor) -> RocksStateTable:
        kind = descriptor.kind
        table_type = (
            RocksMapTable if kind is StateKind.MAP
            else RocksListTable if kind is StateKind.LIST else RocksValueTable
        )
        table = table_type(self, descriptor, self._cf(descriptor.name))
        self._tables[descriptor.name] = table
        return table

    def add_change_listener(self, listener: ChangeListener) -> None:
        """As the base class; what waits in the write buffers was written before ``listener``,
        and every write after goes to RocksDB at once (:class:`RocksValueTable`)."""
        self._write_pending()
        super().add_change_listener(listener)

    def _create_timer_queue(self, name: str) -> RocksDBTimerQueue:
        queue = RocksDBTimerQueue(
            self, self.key_group_range, name, self._timer_cf(time_order_cf_name(name)),
            self._cf(timer_state_name(name)), self._timer_cf(COUNTS_CF), self.options.timer_cache_size)
        self._rocks_timers[name] = queue
        return queue

    def _table_of(self, state_name: str) -> RocksStateTable:
        return self._tables[state_name]

    # ------------------------------------------------------------------ changes

    def _apply_change(self, change: KeyedStateChange) -> None:
        queue = self._timer_queue_of(change)
        if queue is not None:
            queue.apply_change(change)
            return
        self._write_pending()
        cf = self._cf(change.state_name)
        slot = key_prefix(change.key_group, change.key) + namespace_part(change.namespace)
        op = change.op
        if op is StateChangeOp.PUT:
            cf.put(slot + (change.user_key or b""), change.value or b"")
        elif op is StateChangeOp.ADD:
            cf.put(slot, (cf.get(slot) or b"") + frame_element(change.value or b""))
        elif op is StateChangeOp.DELETE:
            cf.delete(slot + (change.user_key or b""))
        else:
            cf.delete_range(slot, successor(slot))

    def cleanup_expired_state(self, limit: int | None = None) -> int:
        """Remove expired TTL values (what a compaction filter would do, which rocksdict cannot
        host): a full scan (``limit`` None), or the next ``limit`` entries from where the last
        call stopped, state by state in key order, a new pass starting once one has gone over
        every state; returns how many entries were removed or rewritten."""
        now, removed, checked = self.clock.now_ms(), 0, 0
        states = sorted(name for name in self._tables if self._states[name].descriptor.ttl is not None)
        index, start = (0, None) if limit is None else self._cleanup_at
        if states:
            self._write_pending()
        while index < len(states) and (limit is None or checked < limit):
            descriptor = self._states[states[index]].descriptor
            assert descriptor.ttl is not None
            ttl, cf, is_list = descriptor.ttl.ttl_ms, self._cf(states[index]), descriptor.kind is StateKind.LIST
            entries = cf.iter()
            entries.seek_to_first() if start is None else entries.seek(start)
            while entries.valid() and (limit is None or checked < limit):
                db_key, value = entries.key(), entries.value()
                kept = _live_value(value, ttl, now, is_list)
                if kept != value:
                    removed += 1
                    cf.delete(db_key) if kept is None else cf.put(db_key, kept)
                    if self._listeners:  # a changelog replays to the same state
                        self._emit_cleanup(states[index], db_key, kept)
                checked += 1
                entries.next()
            if entries.valid():  # the budget ran out inside this state
                start = entries.key()
                break
            index, start = index + 1, None
        self._cleanup_at = (index, start) if index < len(states) else (0, None)
        return removed

    def _emit_cleanup(self, state_name: str, db_key: bytes, kept: bytes | None) -> None:
        """The change a cleanup made to one stored entry, to the listeners: a DELETE of the value
        or map entry, or a list's live elements PUT again."""
        key_group, key, namespace, user_key = split_db_key(db_key)
        change = KeyedStateChange(state_name, key_group, key, namespace, StateChangeOp.DELETE if kept is None
                                  else StateChangeOp.PUT, user_key or None, kept)
        for listener in self._listeners:
            listener(change)

    def size(self) -> BackendSize:
        """RocksDB's own figures per column family (:mod:`tidemark.state.sizes`)."""
        self._check_open()
        self._write_pending()
        states = {}
        for name in self._tables:
            family = self._cf(name)
            sst = family.property_int_value("rocksdb.live-sst-files-size") or 0
            memtables = family.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
            states[name] = StateSize(family.property_int_value("rocksdb.estimate-num-keys") or 0, sst + memtables,
                                     sst, memtables,
                                     family.property_int_value("rocksdb.estimate-pending-compaction-bytes") or 0)
        memory = self._resources.memory
        return BackendSize(states, memory.usage(), id(memory))

    def settle(self, timeout_s: float = 120.0) -> bool:
        """Flush memtables and wait until no flush or compaction is pending or running;
        ``False`` if ``timeout_s`` passed first. A settled database's SST set is stable, so
        the next incremental snapshots share it."""
        self._check_open()
        self._write_pending()
        families = [self._db, *self._cfs.values(), *self._timer_cfs.values()]
        for family in families:
            family.flush()
        deadline = time.monotonic() + timeout_s
        busy = ("rocksdb.compaction-pending", "rocksdb.num-running-compactions",
                "rocksdb.num-running-flushes", "rocksdb.mem-table-flush-pending")
        while any(f.property_int_value(p) for f in families for p in busy):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    # ------------------------------------------------------------------ snapshots

    def _checked_metas(self) -> list[dict[str, Any]]:
        metas = self._state_metas()
        unknown = set(self._cfs) - {m["name"] for m in metas}
        if unknown:
            raise StateRegistrationError(f"states {sorted(unknown)} have data but no definition")
        return metas

    def snapshot_async(self, checkpoint_id: CheckpointId, storage: CheckpointStorage, *,
                       canonical: bool = False) -> AsyncSnapshot[KeyedSnapshot]:
        """Incremental native snapshot (if enabled in options) or, with ``canonical=True`` or
        incremental disabled, a full snapshot in the canonical format (savepoints). Either way
        the synchronous part only opens a copy-on-write capture (:mod:`.capture`) whose local
        RocksDB checkpoint a thread of its own takes; the asynchronous part waits for it, writes
        the pre-images back into it, then uploads its new SST files, or reads it into the
        canonical file. One asynchronous part at a time: the next one's upload starts from this one's."""
        self._check_open()
        self._end_capture()
        metas = self._checked_metas()
        header = {**self._header(checkpoint_id, "rocksdb"), "states": metas}
        for meta in metas:  # a defined state without data still gets its (empty) column family
            self._cf(meta["name"])
        for queue in self._rocks_timers.values():
            queue.write_counts()
        db, work_dir = self._db, self.path / "checkpoints"
        capture = self._capture = Capture(
            [*self._cfs.values(), *self._timer_cfs.values()],
            lambda: create_local_checkpoint(db, work_dir, int(checkpoint_id)), f"rocksdb-capture-{checkpoint_id}")

        def taken() -> tuple[Path, set[str]]:
            """The local checkpoint as of the barrier, and the SST files only it has."""
            local = capture.take()
            return local, capture.written_back(local, self._resources.db_options())

        def discard() -> None:
            capture.abandon()
            shutil.rmtree(work_dir / f"chk-{checkpoint_id}", ignore_errors=True)

        if canonical or not self.options.incremental:
            now = self.clock.now_ms()

            def write_full() -> KeyedSnapshot:
                local, _ = taken()
                full = self._full_snapshot(checkpoint_id, storage, header, metas, self._full_entries(local, metas, now))
                (ref,) = full.handles[0].files
                self.last_snapshot_stats = SnapshotStats((ref.path,), (), ref.size_bytes, ref.size_bytes)
                return full

            return AsyncSnapshot(write_full, discard)

        def upload() -> KeyedSnapshot:
            local, own = taken()
            files, stats = upload_incremental(local, storage, self._snapshot_path(int(checkpoint_id), ""),
                                              f"shared/{self.operator_id}", header, self._uploaded, own)
            self.last_snapshot_stats = stats
            return self._keyed_snapshot(StateHandleKind.KEYED_INCREMENTAL, files, stats.state_size,
                                        stats.bytes_written)

        return AsyncSnapshot(upload, discard)

    def _full_entries(self, local: Path, metas: list[dict[str, Any]], now: int) -> Iterator[Entry]:
        """The canonical entries of a local checkpoint, expired TTL values left out."""
        return _live_entries(read_states(local, metas, self.key_group_range), now)

    def canonical_state(self) -> tuple[list[dict[str, Any]], Iterator[Entry]]:
        """Read from the open database (its column families, in key order, the blocks read
        not kept in its block cache: :func:`scan_options`), as :meth:`snapshot_async`'s canonical
        snapshot reads its local checkpoint."""
        self._check_open()
        self._write_pending()
        metas = self._checked_metas()
        scan = scan_options()
        families = ((meta, iter_column_family(self._cf(meta["name"]), meta, self.key_group_range, scan))
                    for meta in metas)
        return metas, _live_entries(families, self.clock.now_ms())

    # ------------------------------------------------------------------ restore

    def restore(self, snapshots: Sequence[KeyedSnapshot], storage: CheckpointStorage) -> None:
        """Load our key groups; the incremental handle overlapping most becomes the base
        database (clipped to our range), every other handle is merged entry by entry.
        Changelog ranges are ignored (the changelog backend replays them)."""
        self._end_capture()
        relevant = self._handles_to_restore(snapshots)
        incremental = [h for h in relevant if h.kind is StateHandleKind.KEYED_INCREMENTAL]
        base = max(incremental, key=self._overlap, default=None)
        if base is not None:
            self._restore_base(base, storage)
        for handle in relevant:
            if handle is not base:
                key_groups = (handle_key_groups(handle).intersection(self.key_group_range),)
                for part in read_handle(handle, storage, self.key_group_range):
                    self._merge_metas(part.states, part.source, key_groups)
                    self._write_entries(part.entries)

    def _overlap(self, handle: StateHandle) -> int:
        their = KeyGroupRange(handle.key_group_start, handle.key_group_end)
        return len(their.intersection(self.key_group_range))

    def _restore_base(self, handle: StateHandle, storage: CheckpointStorage) -> None:
        staging = self.path / "restore-staging"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            metadata = download(handle, storage, staging)  # verified before touching the db
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        self._release_db()
        shutil.rmtree(self._db_path, ignore_errors=True)
        staging.rename(self._db_path)
        families = set(rocksdict.Rdict.list_cf(str(self._db_path), self._resources.db_options()))
        self._db = self._open()
        self._merge_metas(metadata["states"], handle.files[0].path,
                          (handle_key_groups(handle).intersection(self.key_group_range),))
        timer_families = [self._timer_cf(name) for name in sorted(families)
                          if name == COUNTS_CF or name.startswith(TIME_ORDER_CF_PREFIX)]
        low, high = key_group_bytes(self.key_group_range.start), key_group_bytes(self.key_group_range.end + 1)
        for cf in [*(self._cf(meta["name"]) for meta in metadata["states"]), *timer_families]:
            if self.key_group_range.start > 0:
                cf.delete_range(b"", low)
            cf.delete_range(high, b"\xff")
        for meta in metadata["states"]:  # timers written before they had a family of their own (or namespaces)
            if is_timer_state(meta["name"]):
                queue_name = queue_name_of(meta["name"])
                if time_order_cf_name(queue_name) not in families:
                    rebuild_time_order(queue_name, self._cf(meta["name"]),
                                       self._timer_cf(time_order_cf_name(queue_name)), self._timer_cf(COUNTS_CF))
        for name in families:
            if name.startswith(LEGACY_TIME_ORDER_CF_PREFIX):
                self._db.drop_column_family(name)
        same_range = (handle.key_group_start, handle.key_group_end) == (
            self.key_group_range.start, self.key_group_range.end)
        if same_range:  # the files are exactly what we would upload: reuse them next time
            by_path = {ref.path: ref for ref in handle.files}
            for item in metadata["files"]:
                if item["shared"]:
                    self._uploaded[item["name"]] = by_path[item["path"]]

    def _write_entries(self, entries: Iterator[Entry]) -> None:
        """Write restored entries (migrated when their source's definition is older,
        ``_source_migration``); timers go through their queue (which keeps its order and counts)."""
        def states() -> Iterator[Entry]:
            for e in entries:
                if e.state_name in self._evolving:
                    migrate = self._source_migration(e.state_name, e.key_group, element=False)
                    if migrate is not None:
                        e = Entry(e.state_name, e.key_group, e.key, e.namespace, e.user_key, migrate(e.value))
                if is_timer_state(e.state_name):
                    self._apply_change(KeyedStateChange(e.state_name, e.key_group, e.key, e.namespace,
                                                        StateChangeOp.PUT, e.user_key, e.value))
                else:
                    yield e

        self._put_all(states())

    def _put_all(self, entries: Iterable[Entry]) -> int:
        """Write ``entries`` into their states' column families, in batches; how many."""
        self._end_capture()  # written past the column families' own methods
        batch, count, batched = rocksdict.WriteBatch(raw_mode=True), 0, 0
        for e in entries:
            self._cf(e.state_name)
            handle = self._db.get_column_family_handle(CF_PREFIX + e.state_name)
            key = key_prefix(e.key_group, e.key) + namespace_part(e.namespace) + (e.user_key or b"")
            batch.put(key, e.value, handle)
            count += 1
            batched += len(key) + len(e.value)
            if batched >= _BATCH_BYTES:
                self._db.write(batch)
                batch, batched = rocksdict.WriteBatch(raw_mode=True), 0
        if batched:
            self._db.write(batch)
        return count

    def _migrate_stored(self, name: str, migrate: Migration) -> int:
        cf = self._cf(name)
        count = self._put_all(Entry(e.state_name, e.key_group, e.key, e.namespace, e.user_key, migrate(e.value))
                              for e in iter_column_family(cf, self._restored_meta[name], self.key_group_range))
        if count:
            cf.compact_range(None, None)  # the old versions gone from the next snapshot
        return count

    # ------------------------------------------------------------------ close

    def _release_db(self) -> None:
        self._end_capture()
        for table in self._tables.values():
            table._cf = None  # type: ignore[assignment]
        for queue in self._rocks_timers.values():
            queue.release()
        self._cfs.clear()
        self._timer_cfs.clear()
        self._db.close()
        del self._db

    def _close(self) -> None:
        self._release_db()
        self._tables.clear()
        self._rocks_timers.clear()
        shutil.rmtree(self._db_path, ignore_errors=True)
        shutil.rmtree(self.path / "checkpoints", ignore_errors=True)


def _live_entries(states: Iterable[tuple[dict[str, Any], Iterator[Entry]]], now: int) -> Iterator[Entry]:
    """The entries of each ``(state definition, entries)``, expired TTL values left out."""
    for meta, entries in states:
        ttl, is_list = meta["ttl_ms"], meta["kind"] == StateKind.LIST.value
        for entry in entries:
            if ttl is None:
                yield entry
                continue
            value = _live_value(entry.value, ttl, now, is_list)
            if value is not None:
                yield Entry(entry.state_name, entry.key_group, entry.key, entry.namespace,
                            entry.user_key, value)


def _live_value(value: bytes, ttl_ms: int, now_ms: int, is_list: bool) -> bytes | None:
    """``value`` without its expired parts (``None`` when nothing is left)."""
    if not is_list:
        return None if is_expired(timestamp_of(value), ttl_ms, now_ms) else value
    elements = unframe_elements(value)
    live = [e for e in elements if not is_expired(timestamp_of(e), ttl_ms, now_ms)]
    if len(live) == len(elements):
        return value
    return frame_elements(live) if live else None
