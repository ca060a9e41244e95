"""A view of checkpoint storage that places one snapshot's files where the store expects them.

State backends write paths relative to "their" storage: private files anywhere, files meant to
be shared between checkpoints under ``shared/``. :class:`SnapshotStorage` maps private paths
into the checkpoint's (or savepoint's) directory and ``shared/...`` into the job's shared
directory, so the checkpoint-store finds private files under the checkpoint and reference-counts
shared ones across checkpoints. Returned :class:`StateFile` paths are relative to the storage
root; reads by ``StateFile`` go to the root storage unchanged. With ``all_shared`` every file is
written as shared, private folder included (a snapshot many checkpoints reference, such as a
materialized one); ``list`` names the files of the private folder as the backend wrote them.

Lifecycle: one instance per (task snapshot of one) checkpoint; it holds no resources.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

from tidemark.protocol.messages import StateFile
from tidemark.storage.base import CheckpointStorage

SHARED = "shared/"


class SnapshotStorage:
    def __init__(self, root: CheckpointStorage, private_dir: str, shared_dir: str, *,
                 all_shared: bool = False) -> None:
        self.root = root
        self.url = root.url
        self.all_shared = all_shared
        self._private = private_dir.rstrip("/") + "/"
        self._shared = shared_dir.rstrip("/") + "/"

    def _map(self, path: str) -> str:
        if path.startswith(SHARED):
            return self._shared + path[len(SHARED):]
        return self._private + path

    def write_bytes(self, path: str, data: bytes, *, shared: bool = False) -> StateFile:
        return self.root.write_bytes(self._map(path), data, shared=shared or self.all_shared)

    def write_from(self, path: str, source: BinaryIO, *, shared: bool = False) -> StateFile:
        return self.root.write_from(self._map(path), source, shared=shared or self.all_shared)

    def read_bytes(self, path: str) -> bytes:
        return self.root.read_bytes(self._map(path))

    def read_verified(self, ref: StateFile) -> bytes:
        """``ref`` names a root-relative path, as every returned ``StateFile`` does."""
        return self.root.read_verified(ref)

    def read_verified_into(self, ref: StateFile, out: BinaryIO) -> None:
        self.root.read_verified_into(ref, out)

    def exists(self, path: str) -> bool:
        return self.root.exists(self._map(path))

    def located(self, path: str) -> str:
        return self.root.located(self._map(path))

    def check_target(self, directory: str) -> None:
        self.root.check_target(self._map(directory))

    def delete(self, path: str) -> None:
        self.root.delete(self._map(path))

    def list(self, prefix: str = "") -> Iterator[str]:
        """Paths (as the backend names them) of the private folder's files under ``prefix``."""
        start = len(self._private)
        for path in self.root.list(self._map(prefix).rstrip("/")):
            yield path[start:]
