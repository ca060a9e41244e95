"""Checkpoint storage: where state files and checkpoint metadata live.

Lifecycle: a storage is opened from a URL (``file:///var/lib/tidemark`` or
``s3://bucket/prefix``), used by many writers and readers at once, and never closed
explicitly; every method is independent and safe to call from several threads.

Paths are POSIX-style and *relative to the storage root*; implementations must refuse any path
that is absolute or escapes the root (``..``), so a request can never name a file outside it.
Writes are atomic: a reader sees either no file or the whole file, never a partial one.
"""

from __future__ import annotations

import hashlib
from typing import BinaryIO, Iterable, Iterator, Protocol, runtime_checkable

from tidemark.protocol.messages import StateFile


class StorageError(Exception):
    """Base class of storage failures."""


class InvalidStoragePath(StorageError):
    """The path is absolute, escapes the storage root or is otherwise malformed."""


class TargetConflict(InvalidStoragePath):
    """A directory to write into is taken by what storage holds: a file at it or at a directory
    above it, or (filesystem) a symlink on the way."""


def taken_by_file(directory: str, name: str) -> TargetConflict:
    """The conflict of ``directory`` with the existing file ``name``, at it or above it."""
    if name == directory:
        return TargetConflict(f"{directory!r} is an existing file, not a directory")
    return TargetConflict(f"{directory!r} lies under {name!r}, an existing file")


class CorruptStateFile(StorageError):
    """A file's content does not match its recorded checksum or size."""


def verified(ref: StateFile, data: bytes) -> bytes:
    """``data`` if it matches ``ref``'s recorded size and SHA-256; else ``CorruptStateFile``."""
    _check(ref, len(data), hashlib.sha256(data).hexdigest())
    return data


def copy_verified(ref: StateFile, chunks: Iterable[bytes], out: BinaryIO) -> None:
    """Write ``chunks`` (the content of ``ref.path``) into ``out``, then ``CorruptStateFile`` if
    they do not match ``ref``'s recorded size and SHA-256 (``out`` then holds what was read)."""
    digest, size = hashlib.sha256(), 0
    for chunk in chunks:
        digest.update(chunk)
        out.write(chunk)
        size += len(chunk)
    _check(ref, size, digest.hexdigest())


def _check(ref: StateFile, size: int, digest: str) -> None:
    if size != ref.size_bytes:
        raise CorruptStateFile(f"{ref.path}: size {size} differs from the recorded {ref.size_bytes}")
    if digest != ref.sha256:
        raise CorruptStateFile(f"{ref.path}: sha256 {digest} differs from the recorded {ref.sha256}")


@runtime_checkable
class CheckpointStorage(Protocol):
    """Durable, atomic file storage for checkpoints (Flink: CheckpointStorage)."""

    url: str

    def write_bytes(self, path: str, data: bytes, *, shared: bool = False) -> StateFile:
        """Atomically write ``data`` at ``path``; return its size and SHA-256."""

    def write_from(self, path: str, source: BinaryIO, *, shared: bool = False) -> StateFile:
        """Atomically stream ``source`` to ``path``; return its size and SHA-256."""

    def read_bytes(self, path: str) -> bytes:
        """Whole content of ``path``; ``FileNotFoundError`` when absent."""

    def read_verified(self, ref: StateFile) -> bytes:
        """Content of ``ref.path``, raising ``CorruptStateFile`` (naming the file) on mismatch."""

    def read_verified_into(self, ref: StateFile, out: BinaryIO) -> None:
        """Write the content of ``ref.path`` into ``out`` a chunk at a time (memory bounded
        whatever the file's size), then raise ``CorruptStateFile`` (naming the file) on mismatch:
        what ``out`` received is then to be discarded."""

    def exists(self, path: str) -> bool: ...

    def located(self, path: str) -> str:
        """The path a ``StateFile`` of the file at ``path`` names (what a write there returns):
        relative to the storage root, also from a view of a part of it."""

    def check_target(self, directory: str) -> None:
        """Refuse ``directory`` as a place to write files into, before anything is written there:
        ``InvalidStoragePath`` when the path is not allowed, ``TargetConflict`` when a file is at
        it or at a directory above it, or a symlink is on the way. For directories a request
        names (a savepoint target); writes elsewhere follow the layout and need no check."""

    def delete(self, path: str) -> None:
        """Remove ``path``; a missing file is not an error (deletes are idempotent)."""

    def list(self, prefix: str = "") -> Iterator[str]:
        """Relative paths of every file under ``prefix``."""
