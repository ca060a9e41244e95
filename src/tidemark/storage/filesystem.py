"""Checkpoint storage on a local or mounted filesystem (``file:///absolute/root``).

Writes go to a temporary file in the target directory, are fsynced, renamed into place and the
directory is fsynced, so a crash leaves either the old state or the whole new file. SHA-256 is
computed while writing. Every path is validated before use: relative POSIX path, no ``..``, no
empty or ``.`` components, no NUL or backslash, and - after resolving symlinks - inside the root.
Directories exist only while they hold a file, as on an object store: a delete removes the
directories it leaves empty, up to (not including) the root, so discarded checkpoints leave no
directory tree behind; a write that races such a removal creates its directory again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator
from urllib.parse import unquote, urlparse

from tidemark.protocol.messages import StateFile
from tidemark.storage.base import InvalidStoragePath, TargetConflict, copy_verified, taken_by_file, verified

_TMP_PREFIX = ".tmp-"
_CHUNK = 1 << 20
_MKDIR_ATTEMPTS = 5


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemCheckpointStorage:
    """A ``CheckpointStorage`` rooted at one directory (created if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.url = self.root.as_uri()

    @classmethod
    def from_url(cls, url: str) -> FilesystemCheckpointStorage:
        parsed = urlparse(url)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise ValueError(f"not a local file:// URL: {url!r}")
        if not parsed.path.startswith("/"):
            raise ValueError(f"file:// URL needs an absolute path: {url!r}")
        return cls(unquote(parsed.path))

    # ---------------------------------------------------------------- paths

    def _parts(self, path: str) -> list[str]:
        """The components of ``path``; ``InvalidStoragePath`` if it is malformed."""
        if not isinstance(path, str) or not path or "\x00" in path or "\\" in path:
            raise InvalidStoragePath(f"malformed storage path: {path!r}")
        if path.startswith("/"):
            raise InvalidStoragePath(f"absolute storage path refused: {path!r}")
        parts = path.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise InvalidStoragePath(f"storage path with empty, '.' or '..' part: {path!r}")
        if parts[-1].startswith(_TMP_PREFIX):
            raise InvalidStoragePath(f"reserved temporary file name: {path!r}")
        return parts

    def _resolve(self, path: str) -> Path:
        """The absolute location of ``path``; ``InvalidStoragePath`` if it is not allowed."""
        target = self.root.joinpath(*self._parts(path))
        real = Path(os.path.realpath(target))
        if real != self.root and self.root not in real.parents:
            raise InvalidStoragePath(f"storage path escapes the root via a symlink: {path!r}")
        return target

    def check_target(self, directory: str) -> None:
        """Each existing component of ``directory``, from the root down, must be a directory and
        not a symlink (whether it points inside the root or not)."""
        location = self.root
        for part in self._parts(directory):
            location = location / part
            name = location.relative_to(self.root).as_posix()
            if location.is_symlink():
                raise TargetConflict(f"{directory!r} is a symlink" if name == directory else
                                     f"{directory!r} passes through the symlink {name!r}")
            if not location.exists():
                return
            if not location.is_dir():
                raise taken_by_file(directory, name)

    # ---------------------------------------------------------------- writes

    def write_bytes(self, path: str, data: bytes, *, shared: bool = False) -> StateFile:
        target = self._resolve(path)
        digest = hashlib.sha256(data).hexdigest()
        self._atomic_write(target, lambda out: out.write(data))
        return StateFile(path=path, size_bytes=len(data), sha256=digest, shared=shared)

    def write_from(self, path: str, source: BinaryIO, *, shared: bool = False) -> StateFile:
        target = self._resolve(path)
        digest = hashlib.sha256()
        size = 0

        def copy(out: BinaryIO) -> None:
            nonlocal size
            while chunk := source.read(_CHUNK):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)

        self._atomic_write(target, copy)
        return StateFile(path=path, size_bytes=size, sha256=digest.hexdigest(), shared=shared)

    def _atomic_write(self, target: Path, fill: object) -> None:
        for attempt in range(_MKDIR_ATTEMPTS):  # a concurrent delete may prune the empty directory
            target.parent.mkdir(parents=True, exist_ok=True)
            self._resolve_existing_parent(target)
            try:
                fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=target.parent)
                break
            except FileNotFoundError:
                if attempt == _MKDIR_ATTEMPTS - 1:
                    raise
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)  # type: ignore[operator]
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:  # also an exit that interrupts the write (SIGTERM): nothing is left behind
            Path(tmp).unlink(missing_ok=True)
            self._prune_empty(target.parent)
            raise
        _fsync_dir(target.parent)

    def _resolve_existing_parent(self, target: Path) -> None:
        real = Path(os.path.realpath(target.parent))
        if real != self.root and self.root not in real.parents:
            raise InvalidStoragePath(f"storage directory escapes the root: {target.parent}")

    # ---------------------------------------------------------------- reads

    def read_bytes(self, path: str) -> bytes:
        return self._resolve(path).read_bytes()

    def read_verified(self, ref: StateFile) -> bytes:
        return verified(ref, self.read_bytes(ref.path))

    def read_verified_into(self, ref: StateFile, out: BinaryIO) -> None:
        with self._resolve(ref.path).open("rb") as f:
            copy_verified(ref, iter(lambda: f.read(_CHUNK), b""), out)

    def exists(self, path: str) -> bool:
        return self._resolve(path).is_file()

    def located(self, path: str) -> str:
        return path

    def delete(self, path: str) -> None:
        target = self._resolve(path)
        try:
            target.unlink()
        except FileNotFoundError:
            return
        _fsync_dir(target.parent)
        self._prune_empty(target.parent)

    def _prune_empty(self, directory: Path) -> None:
        """Remove ``directory`` and its ancestors below the root while they are empty."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (or already gone, or raced by a writer): stop here
                return
            _fsync_dir(directory.parent)
            directory = directory.parent

    def list(self, prefix: str = "") -> Iterator[str]:
        """Every file whose relative path starts with ``prefix``, sorted."""
        if prefix.startswith("/") or ".." in prefix.split("/") or "\x00" in prefix:
            raise InvalidStoragePath(f"invalid listing prefix: {prefix!r}")
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        start = self.root.joinpath(*[p for p in base_dir.split("/") if p]) if base_dir else self.root
        if not start.is_dir():
            return iter(())
        found = []
        for directory, _, files in os.walk(start):
            for name in files:
                if name.startswith(_TMP_PREFIX):
                    continue
                rel = Path(directory, name).relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    found.append(rel)
        return iter(sorted(found))
