"""Where a job's checkpoints and savepoints live inside checkpoint storage.

``<job>/chk-<id>/_metadata`` for checkpoints and ``<job>/savepoints/sp-<id>/_metadata`` for
savepoints; every path is relative to the storage root. State files a task writes for a
checkpoint go under the same directory; shared files (incremental snapshots) under
``<job>/shared/``.
"""

from __future__ import annotations

import re

from tidemark.types import CheckpointId, CheckpointType, JobId

METADATA_FILE = "_metadata"
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def validate_job_id(job_id: JobId) -> JobId:
    """``job_id`` if usable as one path segment (letters, digits, ``._-``); else ValueError."""
    if not _JOB_ID.fullmatch(job_id) or ".." in job_id:
        raise ValueError(f"job id not usable as a storage path segment: {job_id!r}")
    return job_id


def savepoint_area(job_id: JobId) -> str:
    """Directory of a job's savepoints, ``<job>/savepoints``; a savepoint target lies inside it."""
    return f"{validate_job_id(job_id)}/savepoints"


def checkpoint_dir(job_id: JobId, checkpoint_id: CheckpointId, kind: CheckpointType) -> str:
    """Directory of one checkpoint or savepoint."""
    validate_job_id(job_id)
    if checkpoint_id < 0:
        raise ValueError(f"checkpoint id must be >= 0, got {checkpoint_id}")
    if kind.is_savepoint:
        return f"{savepoint_area(job_id)}/sp-{checkpoint_id}"
    return f"{job_id}/chk-{checkpoint_id}"


def metadata_path(job_id: JobId, checkpoint_id: CheckpointId, kind: CheckpointType) -> str:
    """Path of the ``_metadata`` file of one checkpoint or savepoint."""
    return f"{checkpoint_dir(job_id, checkpoint_id, kind)}/{METADATA_FILE}"


def shared_dir(job_id: JobId) -> str:
    """Directory of files shared between checkpoints (reference-counted)."""
    return f"{validate_job_id(job_id)}/shared"
