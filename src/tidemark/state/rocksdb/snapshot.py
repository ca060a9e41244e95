"""Incremental RocksDB snapshots: native SST sets whose unchanged files are shared.

A RocksDB checkpoint (hard links of the live files, after a flush of the memtables) is taken
by a snapshot's capture (:func:`create_local_checkpoint`, :mod:`.capture`); then,
on any thread, every ``*.sst`` file not uploaded before is written once under ``shared/<operator>/<sha256>.sst`` (content-addressed, marked
``shared=True`` so the checkpoint-store reference-counts it); the small mutable files (MANIFEST,
CURRENT, OPTIONS, WAL) are private to the checkpoint. ``INCREMENTAL.json`` maps every file back
to its local name and records the states, so any backend can read the set.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable, Collection
from typing import Any, Iterator

import rocksdict

from tidemark.protocol.messages import StateFile, StateHandle
from tidemark.state.descriptors import StateKind
from tidemark.keygroups import KeyGroupRange
from tidemark.state.rocksdb.table import key_group_bytes, split_db_key
from tidemark.state.snapshot import Entry, RestoredPart, SnapshotFormatError
from tidemark.storage.base import CheckpointStorage

METADATA_NAME = "INCREMENTAL.json"
FORMAT = "tidemark-rocksdb-incremental-1"
CF_PREFIX = "state:"


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    """What one snapshot wrote: new files, reused (shared) files, bytes written."""

    uploaded: tuple[str, ...]
    reused: tuple[str, ...]
    bytes_written: int
    state_size: int


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _upload(
    local: Path, storage: CheckpointStorage, private_dir: str, shared_dir: str,
    uploaded: dict[str, StateFile],
) -> tuple[StateFile, bool]:
    """``(ref, newly_written)`` for one checkpoint file."""
    name = local.name
    if not name.endswith(".sst"):
        with local.open("rb") as f:
            return storage.write_from(f"{private_dir}/{name}", f), True
    known = uploaded.get(name)
    if known is not None:
        return known, False
    sha = _sha256_of(local)
    path = f"{shared_dir}/{sha}.sst"
    if storage.exists(path):  # another task's, or the base a rescaled restore started from: named as
        # the store names it (relative to the storage root, where ``storage`` is a view of a part)
        ref, fresh = StateFile(storage.located(path), local.stat().st_size, sha, shared=True), False
    else:
        with local.open("rb") as f:
            ref, fresh = storage.write_from(path, f, shared=True), True
    uploaded[name] = ref
    return ref, fresh


def create_local_checkpoint(db: rocksdict.Rdict, work_dir: Path, checkpoint_id: int) -> Path:
    """A RocksDB checkpoint of ``db`` under ``work_dir``: the memtables flushed, every live file
    hard-linked (the database's state now, unchanged by later writes)."""
    checkpoint_dir = work_dir / f"chk-{checkpoint_id}"
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    rocksdict.Checkpoint(db).create_checkpoint(str(checkpoint_dir))
    return checkpoint_dir


def upload_incremental(
    checkpoint_dir: Path, storage: CheckpointStorage, private_dir: str,
    shared_dir: str, header: dict[str, Any], uploaded: dict[str, StateFile], own: Collection[str] = (),
) -> tuple[tuple[StateFile, ...], SnapshotStats]:
    """Upload a local checkpoint (its caller removes it); ``uploaded`` (local SST name -> ref) is
    updated with the live database's files, not with ``own`` (SST files written into the
    checkpoint's copy only: the live database may later name a file of its own alike). One
    upload at a time per database: consecutive ones share ``uploaded``."""
    files: list[dict[str, Any]] = []
    new: list[StateFile] = []
    reused: list[StateFile] = []
    written = 0
    for local in sorted(checkpoint_dir.iterdir()):
        ref, fresh = _upload(local, storage, private_dir, shared_dir, {} if local.name in own else uploaded)
        files.append({"name": local.name, "path": ref.path, "size": ref.size_bytes,
                      "sha256": ref.sha256, "shared": ref.shared})
        (new if fresh else reused).append(ref)
        written += ref.size_bytes if fresh else 0
    live = {uploaded_name for uploaded_name in (f["name"] for f in files)}
    for stale in [name for name in uploaded if name not in live]:
        del uploaded[stale]
    metadata = json.dumps({**header, "format": FORMAT, "files": files}, sort_keys=True).encode()
    meta_ref = storage.write_bytes(f"{private_dir}/{METADATA_NAME}", metadata)
    refs = (meta_ref, *new, *reused)
    stats = SnapshotStats(
        uploaded=tuple(r.path for r in (meta_ref, *new)),
        reused=tuple(r.path for r in reused),
        bytes_written=written + meta_ref.size_bytes,
        state_size=sum(r.size_bytes for r in refs),
    )
    return refs, stats


def read_metadata(handle: StateHandle, storage: CheckpointStorage) -> dict[str, Any]:
    refs = [f for f in handle.files if f.path.endswith("/" + METADATA_NAME)]
    if len(refs) != 1:
        raise SnapshotFormatError(f"incremental handle without a single {METADATA_NAME}")
    metadata = json.loads(storage.read_verified(refs[0]))
    if metadata.get("format") != FORMAT:
        raise SnapshotFormatError(f"{refs[0].path}: unsupported format {metadata.get('format')}")
    return metadata


def download(handle: StateHandle, storage: CheckpointStorage, target: Path) -> dict[str, Any]:
    """Write every file of ``handle`` into ``target`` under its local name, verified."""
    metadata = read_metadata(handle, storage)
    by_path = {ref.path: ref for ref in handle.files}
    target.mkdir(parents=True, exist_ok=True)
    for item in metadata["files"]:
        ref = by_path.get(item["path"])
        if ref is None or ref.sha256 != item["sha256"]:
            raise SnapshotFormatError(f"{item['path']}: listed in metadata but not in the handle")
        with (target / item["name"]).open("wb") as out:  # streamed: an SST file is never in memory whole
            storage.read_verified_into(ref, out)
    return metadata


def open_db(path: Path, options: rocksdict.Options,
            family_options: Callable[[str], rocksdict.Options] | None = None, **kwargs: Any) -> rocksdict.Rdict:
    """Open a database with every column family it has, each with ``family_options(name)`` (else ``options``)."""
    try:
        names = rocksdict.Rdict.list_cf(str(path), options)
    except Exception:  # a fresh directory has no column families yet
        names = []
    families = {name: family_options(name) if family_options else options for name in names if name != "default"}
    return rocksdict.Rdict(str(path), options, column_families=families, **kwargs)


def iter_column_family(
    cf: rocksdict.Rdict, meta: dict[str, Any], key_groups: KeyGroupRange,
    read_opt: rocksdict.ReadOptions | None = None,
) -> Iterator[Entry]:
    """Canonical entries of one state's column family inside ``key_groups`` (read with
    ``read_opt``: :func:`scan_options` for a read of everything once)."""
    is_map = meta["kind"] == StateKind.MAP.value
    for db_key, value in cf.items(from_key=key_group_bytes(key_groups.start), read_opt=read_opt):
        key_group, key, namespace, rest = split_db_key(db_key)
        if key_group > key_groups.end:
            break
        yield Entry(meta["name"], key_group, key, namespace, rest if is_map else None, value)


def scan_options() -> rocksdict.ReadOptions:
    """Read options for a scan of a whole database once: the blocks read do not fill the block
    cache (a scan would fill it, up to its size, with blocks it never reads again: memory would
    then grow with the state read up to the cache's size)."""
    options = rocksdict.ReadOptions()
    options.fill_cache(False)
    return options


def read_states(path: Path, metas: list[dict[str, Any]], key_groups: KeyGroupRange
                ) -> Iterator[tuple[dict[str, Any], Iterator[Entry]]]:
    """Each state of ``metas`` with its entries inside ``key_groups``, read from the database
    files at ``path`` (a downloaded handle or a local checkpoint) opened read-only; a state
    without a column family there has no entries. The entries stream from the database: take
    each state's before the next state (the database closes at the end)."""
    options = rocksdict.Options(raw_mode=True)
    db = open_db(path, options, access_type=rocksdict.AccessType.read_only())
    try:
        families = set(rocksdict.Rdict.list_cf(str(path), options))
        for meta in metas:
            name = CF_PREFIX + meta["name"]
            if name not in families:  # defined without data (snapshots before empty families were kept)
                yield meta, iter(())
                continue
            cf = db.get_column_family(name)
            try:
                yield meta, iter_column_family(cf, meta, key_groups, scan_options())
            finally:
                del cf
    finally:
        db.close()
        del db


def read_incremental(
    handle: StateHandle, storage: CheckpointStorage, key_groups: KeyGroupRange
) -> Iterator[RestoredPart]:
    """The entries of an incremental handle, read through a temporary read-only database."""
    scratch = Path(tempfile.mkdtemp(prefix="tidemark-restore-"))
    try:
        metadata = download(handle, storage, scratch / "db")
        for meta, entries in read_states(scratch / "db", metadata["states"], key_groups):
            yield RestoredPart(handle.files[0].path, [meta], entries)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
