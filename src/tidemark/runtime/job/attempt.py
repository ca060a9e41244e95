"""What the supervisor hands a stage worker: the attempt, and the lines its process receives.

A worker started for the attempt gets it as command-line arguments (``tidemark jobs worker``); a
warm standby (:mod:`tidemark.runtime.worker.standby`), or a process released from its attempt at a
failover, gets it as one JSON line on its standard input (:meth:`Assignment.to_line`); ``release
<epoch>`` (:func:`release_line`) ends an attempt in place (:mod:`tidemark.runtime.worker.process`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tidemark.types import Epoch


def stage_file(run_dir: Path, process: str, epoch: int, kind: str) -> Path:
    """``<run_dir>/<process>.epoch-<epoch>.<kind>``: how a stage worker (``process``, see
    :func:`process_name`) tells the supervisor where it is (``ready``, ``processing``, ``released``; ``failed``
    in :mod:`tidemark.runtime.job.start_errors`)."""
    return run_dir / f"{process}.epoch-{epoch}.{kind}"


def process_name(stage: str, worker: int, workers: int) -> str:
    """How one worker process of a stage is named in files and logs: the stage's name when it has
    one worker, ``<stage>.w<worker>`` otherwise."""
    return stage if workers == 1 else f"{stage}.w{worker}"


@dataclass(frozen=True)
class Attempt:
    """What the supervisor hands one stage worker."""

    job_ref: str
    stage: str
    epoch: Epoch
    parallelism: int
    run_dir: Path
    job_args: dict[str, Any] = field(default_factory=dict)
    restore_path: str | None = None  # _metadata of the checkpoint or savepoint to restore
    workers: dict[str, int] = field(default_factory=dict)  # worker processes of each stage as it runs
    worker: int = 0  # which of its stage's workers this one is (runtime.job.ownership)
    # a stage the process runs beside its own, as worker ``worker`` of it: the stage's exchange
    # reader (runtime.job.physical_plan), whose records it then needs no process of its own for
    fused: str | None = None

    def lanes(self) -> list[Attempt]:
        """The stage workers the process runs: the fused one first (its records go to the stage
        through the exchange), then its own, whose name the process has (:attr:`process`)."""
        if self.fused is None:
            return [self]
        return [replace(self, stage=self.fused, fused=None), replace(self, fused=None)]

    @property
    def process(self) -> str:
        return process_name(self.stage, self.worker, self.workers.get(self.stage, 1))

    @property
    def ready_file(self) -> Path:
        """Written when the stage's query started."""
        return stage_file(self.run_dir, self.process, self.epoch, "ready")

    @property
    def processing_file(self) -> Path:
        """Written when the stage processed its first records (the supervisor starts standbys then)."""
        return stage_file(self.run_dir, self.process, self.epoch, "processing")

    @property
    def released_file(self) -> Path:
        """Written when the supervisor released the attempt and the process ended it in place,
        ready for the next one (:mod:`tidemark.runtime.worker.process`)."""
        return stage_file(self.run_dir, self.process, self.epoch, "released")


@dataclass(frozen=True)
class Assignment:
    """The attempt a standby takes over, as the supervisor writes it (one JSON line)."""

    attempt: Attempt
    fault: str | None = None  # TIDEMARK_FAULT for this attempt (runtime.job.faults)
    http_port: int | None = None  # where the stage serves its metrics
    # for an idle worker another job's run left (runtime.placement.idle_workers): the Tidemark
    # variables of the environment a new worker would get, and where its output goes
    env: dict[str, str] | None = None
    log: str | None = None

    def to_line(self) -> bytes:
        doc = asdict(self)
        doc["attempt"]["run_dir"] = str(self.attempt.run_dir)
        return (json.dumps(doc) + "\n").encode()

    @classmethod
    def from_line(cls, line: str) -> Assignment:
        doc = json.loads(line)
        attempt = doc["attempt"]
        return cls(Attempt(attempt["job_ref"], attempt["stage"], Epoch(attempt["epoch"]), attempt["parallelism"],
                           Path(attempt["run_dir"]), attempt["job_args"], attempt["restore_path"],
                           attempt.get("workers", {}), attempt.get("worker", 0), attempt.get("fused")),
                   doc["fault"], doc["http_port"], doc.get("env"), doc.get("log"))


RELEASE = "release"


def release_line(epoch: int) -> bytes:
    """The line that ends attempt ``epoch`` in a worker process without ending the process."""
    return f"{RELEASE} {epoch}\n".encode()
