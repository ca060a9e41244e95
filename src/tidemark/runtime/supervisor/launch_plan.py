"""Which worker processes an attempt launches, and what each runs (pure: the supervisor's
:meth:`~tidemark.runtime.supervisor.supervisor.JobSupervisor._launches` asks it, with the ports).

Every worker ``w`` of every stage of the running job (:mod:`tidemark.runtime.job.physical_plan`)
is one process, named ``<stage>`` or ``<stage>.w<w>`` (:func:`~tidemark.runtime.job.attempt.process_name`),
unless the workers are **fused** (``RunOptions.fused``): then an exchange reader ``s.read`` gets
no process of its own; its worker ``w`` runs in worker ``w`` of ``s`` (``Attempt.fused``: two
lanes of one process, one SparkSession, :mod:`tidemark.runtime.worker.query`). A stage has at least
as many workers as its reader (``physical_plan.reader_workers``), so each reader worker has one.

A fault plan (``--fault attempt@stage@point``) names a stage (its first worker) or one worker
(``<stage>.w<n>``); a launch running one stage worker gets the point as it is, a fused one the
point of each lane it names, scoped to that lane (``<stage>=<point>``, :mod:`tidemark.runtime.job.faults`),
so a reader's fault fires on the reader's hits only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tidemark.api import Stage
from tidemark.runtime.job.attempt import Assignment, Attempt, process_name
from tidemark.runtime.placement.pool import Launch
from tidemark.runtime.supervisor.attempt_planner import FaultPlan
from tidemark.types import Epoch


def plan_launches(stages: Sequence[Stage], *, job_ref: str, job_args: dict[str, Any], epoch: Epoch, attempt: int,
                  parallelism: int, run_dir: Path, restore_path: str | None, faults: Sequence[FaultPlan],
                  fused: bool, port: Callable[[int], int | None]) -> list[Launch]:
    """The launches of attempt number ``attempt`` (0 = first) at ``epoch``, in job order;
    ``port(i)``: where launch ``i`` serves its metrics (None: the pool decides)."""
    workers = {s.name: s.workers or 1 for s in stages}
    readers = {s.forwards_to: s.name for s in stages if s.forwards_to} if fused else {}
    launches: list[Launch] = []
    for stage in stages:
        if fused and stage.forwards_to:  # runs in its stage's processes
            continue
        reader = readers.get(stage.name)
        for worker in range(workers[stage.name]):
            lane = reader if reader is not None and worker < workers[reader] else None
            name = process_name(stage.name, worker, workers[stage.name])
            fault = _fault(faults, attempt, stage.name, worker, workers)
            if lane is not None:  # each lane's point scoped to it
                points = ((lane, _fault(faults, attempt, lane, worker, workers)), (stage.name, fault))
                fault = ",".join(f"{name}={point}" for name, point in points if point) or None
            worker_attempt = Attempt(job_ref, stage.name, epoch, parallelism, run_dir, job_args, restore_path,
                                     workers, worker, lane)
            launches.append(Launch(name, Assignment(worker_attempt, fault, port(len(launches)))))
    return launches


def _fault(faults: Sequence[FaultPlan], attempt: int, stage: str, worker: int, workers: dict[str, int]) -> str | None:
    """The point a fault plan of this attempt sets for worker ``worker`` of ``stage``."""
    name = process_name(stage, worker, workers[stage])
    return next((f.point for f in faults if f.attempt == attempt
                 and (f.stage == name or (f.stage == stage and worker == 0))), None)
