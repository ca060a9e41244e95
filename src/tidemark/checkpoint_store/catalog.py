"""What a job has in checkpoint storage: its retained checkpoints and savepoints, read from their
``_metadata`` files, the restore source an operator names, and whether a savepoint target an
operator names can be written.

Stateless functions over a ``CheckpointStorage``; they block on storage I/O, so async callers
run them in a thread. Paths come from the layout (``tidemark.checkpoint_store.layout``) or from
a request already checked by :func:`tidemark.admin.request_bodies.validate_relative_path`; the
storage refuses anything resolving outside its root with ``InvalidStoragePath``, which
propagates. A file removed between listing and reading (retention) is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tidemark.checkpoint_store.layout import METADATA_FILE, metadata_path, savepoint_area
from tidemark.checkpoint_store.metadata_codec import MetadataFormatError
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.protocol.messages import CheckpointMetadata
from tidemark.storage.base import CheckpointStorage, InvalidStoragePath, TargetConflict
from tidemark.types import CheckpointId, CheckpointType, JobId


class RestoreSourceNotFound(LookupError):
    """No ``_metadata`` at the place the request names (HTTP 404)."""


class UnusableRestoreSource(ValueError):
    """The ``_metadata`` exists but cannot restore this job: unreadable or another job's (422)."""


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """A ``_metadata`` file and what it holds."""

    path: str
    metadata: CheckpointMetadata


@dataclass(frozen=True, slots=True)
class RetainedListing:
    """Readable entries by id, and the paths whose ``_metadata`` does not decode."""

    entries: tuple[StoredCheckpoint, ...]
    unreadable: tuple[str, ...]


def _pattern(job: JobId, savepoints: bool) -> re.Pattern[str]:
    folder = "savepoints/sp-" if savepoints else "chk-"
    return re.compile(rf"^{re.escape(job)}/{folder}(\d+)/_metadata$")


def list_retained(storage: CheckpointStorage, job: JobId, *, savepoints: bool) -> RetainedListing:
    """The retained savepoints (or checkpoints) of ``job``, by id."""
    pattern = _pattern(job, savepoints)
    prefix = f"{job}/savepoints/" if savepoints else f"{job}/chk-"
    entries: list[StoredCheckpoint] = []
    unreadable: list[str] = []
    for path in storage.list(prefix):
        if not pattern.fullmatch(path):
            continue
        try:
            entries.append(StoredCheckpoint(path, read_metadata(storage, path)))
        except FileNotFoundError:
            continue
        except MetadataFormatError:
            unreadable.append(path)
    entries.sort(key=lambda e: e.metadata.checkpoint_id)
    return RetainedListing(tuple(entries), tuple(unreadable))


def job_in_storage(storage: CheckpointStorage, job: JobId) -> bool:
    """True when anything of ``job`` is in storage."""
    return next(iter(storage.list(f"{job}/")), None) is not None


def find_by_id(storage: CheckpointStorage, job: JobId, checkpoint_id: CheckpointId) -> str | None:
    """The ``_metadata`` path of retained checkpoint or savepoint ``checkpoint_id``, if any."""
    for kind in (CheckpointType.CHECKPOINT, CheckpointType.SAVEPOINT):
        path = metadata_path(job, checkpoint_id, kind)
        if storage.exists(path):
            return path
    return None


def load_restore_source(storage: CheckpointStorage, job: JobId, path: str) -> StoredCheckpoint:
    """The metadata at ``path`` if it can restore ``job``."""
    try:
        metadata = read_metadata(storage, path)
    except FileNotFoundError:
        raise RestoreSourceNotFound(f"no checkpoint or savepoint metadata at {path!r}") from None
    except IsADirectoryError:
        raise RestoreSourceNotFound(f"{path!r} is a directory, not a _metadata file") from None
    except MetadataFormatError as exc:
        raise UnusableRestoreSource(str(exc)) from None  # read_metadata names the file
    if metadata.job_id != job:
        raise UnusableRestoreSource(f"{path} belongs to job {metadata.job_id!r}, not {job!r}")
    return StoredCheckpoint(path, metadata)


def resolve_restore_source(
    storage: CheckpointStorage, job: JobId, checkpoint_id: CheckpointId | None,
    metadata_file: str | None,
) -> StoredCheckpoint:
    """The metadata a restore request names: a retained id of ``job`` or a ``_metadata`` path."""
    if checkpoint_id is not None:
        path = find_by_id(storage, job, checkpoint_id)
        if path is None:
            raise RestoreSourceNotFound(f"job {job!r} has no retained checkpoint or savepoint {checkpoint_id}")
        return load_restore_source(storage, job, path)
    if metadata_file is None:
        raise ValueError("name a checkpoint id or a metadata path")
    return load_restore_source(storage, job, metadata_file)


def check_savepoint_target(storage: CheckpointStorage, job: JobId, target: str) -> None:
    """Refuse ``target`` as the directory of a savepoint of ``job``: the check the operator API
    makes before it accepts a request and a worker makes before it writes the savepoint's state.
    ``InvalidStoragePath`` when ``target`` is outside the job's savepoint area; ``TargetConflict``
    when storage holds a file or a symlink on the way (``CheckpointStorage.check_target``), or
    ``target`` is, or lies inside, an existing savepoint (a directory holding a ``_metadata``)."""
    area = savepoint_area(job)
    if not target.startswith(f"{area}/"):
        raise InvalidStoragePath(f"target must be inside the job's savepoint area {area + '/'!r}: {target!r}")
    storage.check_target(target)
    parts = target.split("/")
    for depth in range(area.count("/") + 2, len(parts) + 1):
        directory = "/".join(parts[:depth])
        if storage.exists(f"{directory}/{METADATA_FILE}"):
            where = "is" if directory == target else f"lies inside {directory!r},"
            raise TargetConflict(f"target {target!r} {where} an existing savepoint")
