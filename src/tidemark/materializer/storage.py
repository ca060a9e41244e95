"""Where a materialized snapshot goes: a view of checkpoint storage under one task's folder, in
which every file is written as *shared*.

A materialized snapshot is referenced by every checkpoint the task takes until its next
materialization, so no file of it may be private to one checkpoint: all are ``shared=True`` and
the checkpoint-store reference-counts them from the first checkpoint that references them and
deletes them once no retained checkpoint or savepoint does. Paths given to the view are relative
to its prefix; the :class:`StateFile` s it returns name the files relative to the storage root,
which is how handles reference them (read them back through the root storage).
"""

from __future__ import annotations

import re
from typing import BinaryIO, Iterator

from tidemark.checkpoint_store.layout import validate_job_id
from tidemark.protocol.messages import StateFile
from tidemark.storage.base import CheckpointStorage
from tidemark.types import JobId, TaskId

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
SHARED = "shared/"


def materialization_prefix(job_id: JobId, task_id: TaskId) -> str:
    """``<job>/materialized/<task>``: the folder of one task's materialized snapshots."""
    return f"{validate_job_id(job_id)}/materialized/{_UNSAFE.sub('_', task_id)}"


class SharedFilesView:
    """A ``CheckpointStorage`` for one materialized snapshot; every file written is shared.

    As a state backend sees it, paths under ``shared/`` (content-addressed SST files, reused by
    later snapshots) go to ``<prefix>/shared/``; every other path to ``<prefix>/<snapshot>/``, a
    folder of this snapshot alone (``snapshot`` should be unique, e.g. id plus a random token,
    so that two writers can never overwrite each other's files).
    """

    def __init__(self, storage: CheckpointStorage, prefix: str, snapshot: str) -> None:
        self.storage = storage
        self.prefix = prefix.strip("/")
        self._private = f"{self.prefix}/{snapshot}/"
        self._shared = f"{self.prefix}/{SHARED}"
        self.url = f"{storage.url.rstrip('/')}/{self.prefix}"

    def _full(self, path: str) -> str:
        if path.startswith(SHARED):
            return self._shared + path[len(SHARED):]
        return self._private + path

    def write_bytes(self, path: str, data: bytes, *, shared: bool = False) -> StateFile:
        return self.storage.write_bytes(self._full(path), data, shared=True)

    def write_from(self, path: str, source: BinaryIO, *, shared: bool = False) -> StateFile:
        return self.storage.write_from(self._full(path), source, shared=True)

    def read_bytes(self, path: str) -> bytes:
        return self.storage.read_bytes(self._full(path))

    def read_verified(self, ref: StateFile) -> bytes:
        """``ref`` names a root-relative path, as every returned ``StateFile`` does."""
        return self.storage.read_verified(ref)

    def exists(self, path: str) -> bool:
        return self.storage.exists(self._full(path))

    def delete(self, path: str) -> None:
        self.storage.delete(self._full(path))

    def list(self, prefix: str = "") -> Iterator[str]:
        """Paths (as the backend names them) of this snapshot's own files under ``prefix``."""
        start = len(self._private)
        for path in self.storage.list(self._full(prefix).rstrip("/")):
            yield path[start:]
