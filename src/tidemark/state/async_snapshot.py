"""The asynchronous part of a snapshot (Flink's ``SnapshotStrategy``: a synchronous part that
captures, then an asynchronous one that writes).

A backend's ``snapshot_async`` does the synchronous part on the processing thread (heap: a
copy-on-write capture of the tables; RocksDB: a copy-on-write capture of the database;
operator state: its items serialized) and returns an :class:`AsyncSnapshot`, whose :meth:`run`
writes what was captured into checkpoint storage on any thread while records keep flowing. The
capture is released when ``run`` ends, whatever happens, or by :meth:`release` when it is never
run (the checkpoint was given up); releasing twice does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def _nothing() -> None:
    return None


class AsyncSnapshot(Generic[T]):
    """``run()`` writes the captured state and returns the snapshot (see the module)."""

    __slots__ = ("_write", "_release", "_released", "_lock")

    def __init__(self, write: Callable[[], T], release: Callable[[], None] = _nothing) -> None:
        self._write = write
        self._release = release
        self._released = False
        self._lock = threading.Lock()

    @classmethod
    def done(cls, result: T) -> AsyncSnapshot[T]:
        """A snapshot whose synchronous part already wrote everything."""
        return cls(lambda: result)

    def run(self) -> T:
        try:
            return self._write()
        finally:
            self.release()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._release()
