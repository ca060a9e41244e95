"""Which checkpoint a failed-over job restores from, and whether an older one may stand in.

After a failure the supervisor restores the newest retained checkpoint or savepoint of the run
(newer than ``baseline``, what storage held when the run started), else the source the run
started from, else nothing (start over). A start that resumes the job's last state chooses the
same way among every retained one (``baseline`` 0, no ``started_from``). :func:`choose_restore_source` first verifies the
candidate in full (:func:`~tidemark.checkpoint_store.verification.verify_checkpoint`: the
``_metadata`` checksum, then every state file's size and SHA-256), so a corrupted checkpoint is
never handed to the workers, and so never restored again and again.

A corrupted newest candidate is never skipped silently. A checkpoint is newer than the ones
before it because its output may already be committed: restoring an older one re-runs the
input in between and would commit that output a second time. So:

* without ``allow_fallback`` (``TIDEMARK_RESTORE_FALLBACK``, default off), :class:`RestoreRefused`
  names the checkpoint and the damaged file, and the job stops;
* with it, the newest older candidate that verifies is chosen only if the two-phase-commit
  markers (``<prefix>.sink-commits``) show that no output of a checkpoint after it was
  committed; otherwise the fallback is refused as well, saying which checkpoint's output is
  committed. Starting over without any checkpoint follows the same rule.

The same rule (:func:`refuse_below_committed_output`) guards a start after an operator discarded
the newest checkpoint (``tidemark checkpoints discard``;
:meth:`tidemark.runtime.supervisor.attempt_planner.AttemptPlanner._refuse_below_discarded`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tidemark.checkpoint_store.verification import CorruptCheckpoint, checkpoint_id_of, verify_checkpoint
from tidemark.checkpoint_store.catalog import list_retained
from tidemark.api import JobSpec
from tidemark.chassis.logs import get_logger
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointingMode

log = get_logger(__name__)


class RestoreRefused(RuntimeError):
    """No restore source keeps the job's output exactly once; the job must stop."""


@dataclass(frozen=True)
class RestoreSource:
    """Restore retained ``checkpoint_id``, or the ``_metadata`` at ``path``; neither: start over."""

    checkpoint_id: int | None = None
    path: str | None = None
    fallback_from: CorruptCheckpoint | None = None  # the corrupted newer candidate, when falling back


CommittedUpTo = Callable[[], int]
"""The newest checkpoint id whose output a commit marker shows committed, 0 for none
(:func:`tidemark.runtime.supervisor.committed_output.newest_committed_checkpoint`); asked only when falling back."""


def restore_candidates(storage: CheckpointStorage, spec: JobSpec, baseline: int) -> list[tuple[int, str]]:
    """Retained checkpoints and savepoints of the job newer than ``baseline``, newest first,
    including those whose ``_metadata`` does not decode."""
    found: dict[int, str] = {}
    for savepoints in (False, True):
        listing = list_retained(storage, spec.job_id, savepoints=savepoints)
        for entry in listing.entries:
            found[entry.metadata.checkpoint_id] = entry.path
        for path in listing.unreadable:
            checkpoint_id = checkpoint_id_of(path)
            if checkpoint_id is not None:
                found.setdefault(checkpoint_id, path)
    return sorted(((i, p) for i, p in found.items() if i > baseline), reverse=True)


def choose_restore_source(storage: CheckpointStorage, spec: JobSpec, *, baseline: int,
                          started_from: str | None, allow_fallback: bool,
                          committed_up_to: CommittedUpTo) -> RestoreSource:
    """Where the next attempt restores from (see the module docstring)."""
    ordered: list[tuple[int | None, str]] = [*restore_candidates(storage, spec, baseline)]
    if started_from is not None:
        ordered.append((checkpoint_id_of(started_from), started_from))
    corrupted: CorruptCheckpoint | None = None
    for checkpoint_id, path in ordered:
        try:
            verify_checkpoint(storage, path)
        except CorruptCheckpoint as exc:
            log.error("checkpoint corrupted", job=spec.job_id, checkpoint=exc.checkpoint_id, file=exc.file,
                      problem=exc.problem)
            if not allow_fallback:
                raise RestoreRefused(
                    f"{exc}. Not falling back to an older checkpoint: its output may be committed already "
                    "and would be written twice. Repair or remove the checkpoint, or set "
                    "TIDEMARK_RESTORE_FALLBACK=true to fall back when that keeps the output exactly once"
                ) from exc
            corrupted = corrupted or exc
            continue
        if corrupted is not None:
            _check_fallback(spec, corrupted, checkpoint_id or 0, committed_up_to)
            log.warning("falling back to an older checkpoint", job=spec.job_id, checkpoint=checkpoint_id,
                        path=path, corrupted=corrupted.checkpoint_id, file=corrupted.file)
        if path == started_from:
            return RestoreSource(path=path, fallback_from=corrupted)
        return RestoreSource(checkpoint_id=checkpoint_id, fallback_from=corrupted)
    if corrupted is not None:
        _check_fallback(spec, corrupted, 0, committed_up_to)
    return RestoreSource(fallback_from=corrupted)


def _check_fallback(spec: JobSpec, corrupted: CorruptCheckpoint, target: int, committed_up_to: CommittedUpTo) -> None:
    refuse_below_committed_output(spec, str(corrupted), target, committed_up_to)


def refuse_below_committed_output(spec: JobSpec, skipped: str, target: int, committed_up_to: CommittedUpTo, *,
                                  remedy: str = "") -> None:
    """Raise :class:`RestoreRefused` when restoring ``target`` (0: starting over) in place of a
    newer checkpoint (``skipped`` says which and why) would commit output a second time: the
    commit markers show a checkpoint after ``target`` committed. ``remedy``: what the operator
    can do, appended to the message."""
    if spec.mode is not CheckpointingMode.EXACTLY_ONCE:
        return  # at-least-once output may repeat anyway
    committed = committed_up_to()
    if committed > target:
        what = f"checkpoint {target}" if target else "the start of the input"
        raise RestoreRefused(
            f"{skipped}. Falling back to {what} is refused: the output of checkpoint {committed} is "
            f"committed already, and restoring an older state would commit it again{remedy}")
