"""Where a job's worker processes run: the one role the supervisor drives, and what it sees of them.

The supervisor (:mod:`tidemark.runtime.supervisor.supervisor`) decides *what* runs (an attempt's worker
processes, :class:`Launch`) and *when* an attempt has failed; a :class:`WorkerPool` decides *where*
and runs them. Two implementations:

* :class:`~tidemark.runtime.placement.local_workers.LocalWorkers`: child processes of the supervisor, on its
  machine (``tidemark jobs run``, the default; the demo, the tests, one pod in the chart);
* :class:`~tidemark.runtime.placement.hosted_workers.HostedWorkers`: worker hosts (``tidemark jobs host``),
  one per stage and worker (``<stage>/<n>``; in the chart, ``W`` pods per stage), each running its
  processes with its own :class:`LocalWorkers` and told what to run over Kafka
  (``tidemark jobs run --worker-hosts``).

Lifecycle, per attempt: ``launch`` -> ``states`` until each is ready, then while it runs ->
``start_standbys`` once it processes records -> at a failover ``release`` (the processes end the
attempt in place and take the next launch's, :mod:`tidemark.runtime.worker.process`), at a stop
``kill``; ``close`` at the end of the run. ``states`` never blocks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from tidemark.protocol.messages import ProcessPhase
from tidemark.runtime.job.attempt import Assignment

__all__ = ["Launch", "ProcessPhase", "ProcessState", "WorkerPool", "standbys_due"]
STANDBY_LATEST_S = 30.0  # the next attempt's standbys start at the latest this long after the attempt


@dataclass(frozen=True)
class Launch:
    """One worker process of an attempt: its name (``runtime.job.attempt.process_name``) and assignment."""

    name: str
    assignment: Assignment


@dataclass(frozen=True)
class ProcessState:
    """Where one worker process of the attempt is."""

    phase: ProcessPhase
    exit_code: int | None = None  # once EXITED; negative: killed by that signal
    reason: str = ""  # why it cannot run, one line (exit status 3, runtime.job.start_errors)
    log: str = ""  # where its log is

    @property
    def exited(self) -> bool:
        return self.phase is ProcessPhase.EXITED

    @property
    def started(self) -> bool:
        """Its query started (or it already ended)."""
        return self.phase is not ProcessPhase.STARTING


def standbys_due(states: Mapping[str, ProcessState], since: float, now: float) -> bool:
    """Whether the next attempt's warm standbys may start: once every process of this attempt
    processes records (or ended), or ``STANDBY_LATEST_S`` after ``since``; their JVMs must not
    slow a recovery down."""
    return now - since > STANDBY_LATEST_S or all(s.phase is ProcessPhase.PROCESSING or s.exited
                                                 for s in states.values())


class WorkerPool(Protocol):
    """Runs one attempt's worker processes at a time, and keeps their warm standbys."""

    def launch(self, launches: Sequence[Launch], *, standby: bool) -> None:
        """Start the attempt's processes, handing each to the released process of its name, or to
        its stage's warm standby, where one is waiting; ``standby``: whether ``start_standbys``
        will start new ones."""
        ...

    def states(self) -> dict[str, ProcessState]:
        """Every process of the last launch by name (non-blocking)."""
        ...

    def waiting_for(self) -> list[str]:
        """What the launch still waits for before its processes can start (worker hosts not seen
        yet), for the supervisor's log; empty when nothing."""
        ...

    def start_standbys(self) -> None:
        """One warm standby per stage of the last launch, for the next attempt."""
        ...

    def release(self) -> None:
        """End the last launch's attempt in its live processes, keeping them for the next launch
        (a failover): each stops its query and closes its state, and keeps its SparkSession."""
        ...

    def kill(self, *, graceful: bool) -> None:
        """End the last launch's processes: SIGTERM (``graceful``) or SIGKILL."""
        ...

    def close(self) -> None:
        """End the standbys and release what the pool holds."""
        ...
