"""A job suspended for a deployment generation stays suspended until that generation starts it.

The chart's pre-upgrade hook stops the job with a savepoint for the upgrade's release revision
(``tidemark savepoint trigger <job> --stop --generation R``): the coordinator records the job as
``SUSPENDED`` for generation R (``SavepointRequest.generation``, ``suspended_generation`` in
``GET /jobs``). The old release's worker would otherwise exit 0 after the stop, Kubernetes would
restart its container before the upgrade replaces the pod, and that start would take the job on
from the savepoint in the old release: the upgraded release would then resume a newer checkpoint
than the hook's savepoint, and a suspend would leave the job running until the scale to zero
cancels it. So:

- at its end, a supervisor whose attempt was stopped for a generation newer than its own (or for
  any generation when it has none: a release that never passed one) does not exit: it waits, not
  ready, until it is stopped (its pod replaced or deleted) or the job no longer is suspended;
- at its start, a supervisor of generation G (``tidemark jobs run --generation G``: the worker of
  release revision G) resumes a job suspended for generation R only when G >= R; an older one
  waits the same way (its container restarted after all).

A start without a generation resumes any suspended job (a job suspended by hand resumes at the
next ``jobs run``), and a stop without one ends the supervisor as before (exit 0).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
POLL_S = 2.0
WAITING = "waiting to be replaced"  # the event a held supervisor logs once
JobDocument = Callable[[], "dict[str, Any] | None"]


def _newer_suspension(job: dict[str, Any] | None, generation: int | None) -> int | None:
    """The generation the job is suspended for when that is newer than ``generation`` (any, for
    None); else None."""
    if job is None or job.get("state") != "SUSPENDED":
        return None
    suspended_for = job.get("suspended_generation")
    if suspended_for is None or (generation is not None and suspended_for <= generation):
        return None
    return int(suspended_for)


def held_at_start(job: dict[str, Any] | None, generation: int | None) -> str | None:
    """Why a start of ``generation`` must not resume the job (its ``GET /jobs`` document, None
    when the coordinator does not know it) now; None when it may start."""
    suspended_for = None if generation is None else _newer_suspension(job, generation)
    if suspended_for is None:
        return None
    return (f"job {job and job.get('job')} is suspended for generation {suspended_for} (a newer deployment "
            f"stopped it with a savepoint to resume it); this start is generation {generation}: it waits to be "
            f"replaced")


def held_at_end(job: dict[str, Any] | None, generation: int | None) -> str | None:
    """Why a supervisor whose attempt a stop-with-savepoint ended must not exit now; None when
    it may (a stop without a generation, or for its own)."""
    suspended_for = _newer_suspension(job, generation)
    if suspended_for is None:
        return None
    mine = "none" if generation is None else str(generation)
    return (f"job {job and job.get('job')} stopped with a savepoint for generation {suspended_for} (this supervisor's: "
            f"{mine}); it waits to be replaced instead of exiting, so that no restart here resumes the job")


def wait_while(held: Callable[[dict[str, Any] | None, int | None], str | None], job_document: JobDocument,
               generation: int | None, stopping: Callable[[], bool], poll_s: float = POLL_S) -> bool:
    """Wait while ``held(job_document(), generation)`` says why; True once it no longer holds,
    False when ``stopping()`` came first."""
    said = False
    while not stopping():
        reason = held(job_document(), generation)
        if reason is None:
            if said:
                log.info("the job is no longer suspended for a newer generation", generation=generation)
            return True
        if not said:
            log.warning(WAITING, reason=reason)
            said = True
        time.sleep(poll_s)
    return False
