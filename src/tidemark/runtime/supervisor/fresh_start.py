"""Which empty start of a job already happened: a restart of a ``--fresh`` start resumes.

Flink's operator's ``stateless`` upgrade mode: a new deployment (an upgrade) starts with empty
state, but a restart of the same deployment (a pod restarted, the whole process tree killed)
keeps exactly-once by resuming the job's last state. The command line of both is the same
(``tidemark jobs run ... --fresh``), so the deployment names itself with a start token,
``--start-id`` (the Helm chart renders a hash of the job's definition): the supervisor records
in checkpoint storage, at ``<job>/fresh-start.json``, the start id it last started empty and the
newest retained checkpoint or savepoint id at that moment (``baseline``). A start with the
recorded start id is a restart: it resumes the newest retained checkpoint or savepoint newer
than ``baseline`` (the state of this deployment), or starts empty again when there is none yet;
any other start id is a new deployment and starts empty (and is recorded in turn).

Checkpoint ids of a job only grow (the coordinator's ledger), so "newer than ``baseline``" is
"taken after this deployment started". The record is written after the start was accepted
(not refused over committed output) and before any worker runs.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from tidemark.checkpoint_store.layout import validate_job_id
from tidemark.storage.base import CheckpointStorage
from tidemark.types import JobId

RECORD_FILE = "fresh-start.json"


class UnreadableFreshStart(ValueError):
    """The record exists but does not decode; the message names the file."""


@dataclass(frozen=True)
class FreshStart:
    """The empty start of ``start_id`` at ``started_at`` (ms), when the newest retained
    checkpoint or savepoint of the job was ``baseline`` (0: none)."""

    start_id: str
    baseline: int
    started_at: int


def record_path(job: JobId) -> str:
    return f"{validate_job_id(job)}/{RECORD_FILE}"


def read_fresh_start(storage: CheckpointStorage, job: JobId) -> FreshStart | None:
    """The recorded fresh start of ``job``; None when it never started with a start id."""
    path = record_path(job)
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
        return FreshStart(str(document["start_id"]), int(document["baseline"]), int(document["started_at"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise UnreadableFreshStart(f"{path} in checkpoint storage does not decode ({exc}); it records which "
                                   f"--start-id last started empty") from None


def record_fresh_start(storage: CheckpointStorage, job: JobId, start: FreshStart) -> None:
    """Atomically replace the record of ``job`` with ``start``."""
    storage.write_bytes(record_path(job), json.dumps(asdict(start), sort_keys=True).encode())


def is_restart(recorded: FreshStart | None, start_id: str) -> bool:
    """True when ``start_id`` already started empty: this start is a restart of it."""
    return recorded is not None and recorded.start_id == start_id


__all__ = ["FreshStart", "UnreadableFreshStart", "is_restart", "read_fresh_start", "record_fresh_start",
           "record_path"]
