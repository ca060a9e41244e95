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

from tidemark.checkpoint_store.layout import validate_job_id
from tidemark.storage.base import CheckpointStorage
from tidemark.storage.scoped import SHARED, SnapshotStorage
from tidemark.types import JobId, TaskId

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def materialization_prefix(job_id: JobId, task_id: TaskId) -> str:
    """``<job>/materialized/<task>``: the folder of one task's materialized snapshots."""
    return f"{validate_job_id(job_id)}/materialized/{_UNSAFE.sub('_', task_id)}"


class SharedFilesView(SnapshotStorage):
    """A ``CheckpointStorage`` for one materialized snapshot; every file written is shared.

    As a state backend sees it, paths under ``shared/`` (content-addressed SST files, reused by
    later snapshots) go to ``<prefix>/shared/``; every other path to ``<prefix>/<snapshot>/``, a
    folder of this snapshot alone (``snapshot`` should be unique, e.g. id plus a random token,
    so that two writers can never overwrite each other's files).
    """

    def __init__(self, storage: CheckpointStorage, prefix: str, snapshot: str) -> None:
        self.prefix = prefix.strip("/")
        super().__init__(storage, f"{self.prefix}/{snapshot}", f"{self.prefix}/{SHARED}", all_shared=True)
        self.url = f"{storage.url.rstrip('/')}/{self.prefix}"
