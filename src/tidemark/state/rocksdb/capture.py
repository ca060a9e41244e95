"""The synchronous part of a RocksDB snapshot: a copy-on-write capture of the live database.

A RocksDB checkpoint (memtables flushed, live files hard-linked) costs a flush, which under a
write load waits on the disk (tens of milliseconds, more in the tail). So the processing thread
does not take it: at the barrier it only opens a :class:`Capture`, which from then on keeps, for
every entry the processing thread changes, the value it had at the barrier (its pre-image: the
first change of an entry reads it first; a range delete reads the range). A capture thread
flushes the memtables (rocksdict releases the interpreter lock while RocksDB flushes), takes the
checkpoint, which now holds the barrier's state plus the changes made since, and closes the
capture; :func:`write_back` then writes the pre-images into the checkpoint's own copy of the
database, so it holds exactly the state at the barrier. The live database is never touched.

Every write to a column family of the live database goes through a :class:`Family`: plain
rocksdict calls, except while a capture is open.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rocksdict

PreImages = dict[bytes, "bytes | None"]


class Family:
    """A column family of the live database. Reads and, outside a capture, writes are
    rocksdict's own bound methods (nothing in between); while a capture is open, ``put``,
    ``delete`` and ``delete_range`` first keep the pre-images of the entries they change."""

    __slots__ = ("raw", "name", "get", "items", "keys", "iter", "put", "delete", "delete_range")

    def __init__(self, raw: rocksdict.Rdict, name: str) -> None:
        self.raw, self.name = raw, name
        self.get, self.items, self.keys, self.iter = raw.get, raw.items, raw.keys, raw.iter
        self.untrack()

    def track(self, before: PreImages) -> None:
        """Keep in ``before`` the value each changed entry had when this was called (``None``: absent)."""
        raw = self.raw
        get, put, delete, delete_range, items = raw.get, raw.put, raw.delete, raw.delete_range, raw.items

        def tracked_put(key: bytes, value: bytes, *args: Any) -> None:
            if key not in before:
                before[key] = get(key)
            put(key, value, *args)

        def tracked_delete(key: bytes, *args: Any) -> None:
            if key not in before:
                before[key] = get(key)
            delete(key, *args)

        def tracked_delete_range(start: bytes, end: bytes, *args: Any) -> None:
            for key, value in items(from_key=start):
                if key >= end:
                    break
                if key not in before:
                    before[key] = value
            delete_range(start, end, *args)

        self.put, self.delete, self.delete_range = tracked_put, tracked_delete, tracked_delete_range

    def untrack(self) -> None:
        raw = self.raw
        self.put, self.delete, self.delete_range = raw.put, raw.delete, raw.delete_range

    def __getattr__(self, name: str) -> Any:  # everything else: the column family's own
        return getattr(self.raw, name)


def _taken() -> Path:
    raise AssertionError("a capture's checkpoint is taken once")


class CaptureAbandoned(RuntimeError):
    """The capture ended before its checkpoint was taken (the snapshot was given up)."""


class Capture:
    """Opened on the processing thread at the barrier (cheap: it only starts tracking); its
    checkpoint is taken on a thread of its own right away, so the time the live database is
    tracked is a flush and a checkpoint, whatever waits before the upload. ``take`` returns the
    checkpoint's directory (waiting for it; taking it now if the thread has not yet)."""

    def __init__(self, families: list[Family], take_checkpoint: Callable[[], Path], name: str) -> None:
        self._families = families
        self._take_checkpoint = take_checkpoint
        self.pre_images: dict[str, PreImages] = {}
        self._lock = threading.Lock()  # one take at a time
        self._tracking = threading.Lock()  # the families tracked: never held while RocksDB works
        self._checkpoint: Path | None = None
        self._error: BaseException | None = None
        self._open = True
        for family in families:
            self._track(family)
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _track(self, family: Family) -> None:
        family.track(self.pre_images.setdefault(family.name, {}))

    def add(self, family: Family) -> None:
        """A column family created while the capture is open (a state defined after the barrier)."""
        with self._tracking:
            if self._open:
                self._families.append(family)
                self._track(family)

    def _run(self) -> None:
        try:
            self.take()
        except BaseException:  # kept: ``take`` raises it again where the snapshot is written
            pass

    def take(self) -> Path:
        with self._lock:
            if self._open:
                try:
                    for family in self._families:
                        family.raw.flush()  # the interpreter lock released: records keep flowing
                    self._checkpoint = self._take_checkpoint()
                except BaseException as e:
                    self._error = e
                finally:
                    self._close()
            if self._error is not None:
                raise self._error
            assert self._checkpoint is not None
            return self._checkpoint

    def abandon(self) -> None:
        """End the capture without its checkpoint, if not taken yet."""
        with self._lock:
            if self._open:
                self._error = CaptureAbandoned("the snapshot was given up before its checkpoint was taken")
                self._close()

    def written_back(self, checkpoint_dir: Path, options: rocksdict.Options) -> set[str]:
        """:func:`write_back` of this capture's pre-images (then let go)."""
        images, self.pre_images = self.pre_images, {}
        return write_back(checkpoint_dir, images, options)

    @property
    def is_open(self) -> bool:
        return self._open

    def _close(self) -> None:
        with self._tracking:
            for family in self._families:
                family.untrack()
            self._families = []  # no handle of the database kept past its close
            self._take_checkpoint = _taken
            self._open = False


def write_back(checkpoint_dir: Path, pre_images: dict[str, PreImages], options: rocksdict.Options) -> set[str]:
    """Write ``pre_images`` (by column family) into the database copy at ``checkpoint_dir``; the
    names of the SST files that wrote there (the checkpoint's own: never the live database's)."""
    changed = {name: entries for name, entries in pre_images.items() if entries}
    if not changed:
        return set()
    before = {p.name for p in checkpoint_dir.glob("*.sst")}
    options.set_disable_auto_compactions(True)  # only the pre-images' file is new
    options.set_max_open_files(16)  # opened lazily: the write back reads no SST file
    names = set(rocksdict.Rdict.list_cf(str(checkpoint_dir), options))
    db = rocksdict.Rdict(str(checkpoint_dir), options,
                         column_families={n: options for n in names if n != "default"})
    write = rocksdict.WriteOptions()
    write.disable_wal = True
    try:
        for name, entries in changed.items():
            if name not in names:  # created after the checkpoint was taken: nothing to undo there
                continue
            family = db.get_column_family(name)
            batch = rocksdict.WriteBatch(raw_mode=True)
            handle = db.get_column_family_handle(name)
            for key, value in list(entries.items()):
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
            db.write(batch, write)
            family.flush()
            del family
    finally:
        db.close()
        del db
    for leftover in [*checkpoint_dir.glob("LOG*"), checkpoint_dir / "LOCK"]:  # the opening's, not the state's
        leftover.unlink(missing_ok=True)
    return {p.name for p in checkpoint_dir.glob("*.sst")} - before
