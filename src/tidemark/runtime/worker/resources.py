"""A stage worker's resources, sampled by its loop every few seconds, never per record
(:meth:`WorkerResources.report`, from :mod:`tidemark.runtime.worker.query`).

- CPU and resident memory of the worker's process tree, read from ``/proc``: the worker's Python
  process, its SparkSession's JVM (a child of it) and their children, such as Spark's Python
  workers (``tidemark_worker_cpu_seconds_total``, ``tidemark_worker_resident_memory_bytes``).
  prometheus-client's ``process_*`` metrics count the Python process alone and carry no ``job``.
  A child's CPU time stays counted after it exits: the kernel adds it to its parent's once the
  parent reaps it.
- The JVM's heap, asked of its MemoryMXBean through py4j (``tidemark_worker_jvm_heap_used_bytes``,
  ``tidemark_worker_jvm_heap_max_bytes``).

The CPU counter grows by what the tree used since the process's previous sample
(:data:`PROCESS_CPU`, shared by the attempts the process runs); a tree that shows less than
before (a child that left it) counts on from there. A metric never takes the worker down: a
sample that fails keeps the last values and is logged once per distinct error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tidemark.chassis.logs import get_logger
from tidemark.processes import PROC, process_tree
from tidemark.runtime.job.metrics import CPU_SECONDS, JVM_HEAP_MAX, JVM_HEAP_USED, RESIDENT_MEMORY
from tidemark.types import JobId

log = get_logger(__name__)


class TreeCpu:
    """The CPU time a process tree used: :meth:`advance` takes the tree's total now and returns
    what it used since the previous call (the whole total the first time; never negative)."""

    def __init__(self) -> None:
        self._seen = 0.0

    def advance(self, total_s: float) -> float:
        used = max(0.0, total_s - self._seen)
        self._seen = total_s
        return used


PROCESS_CPU = TreeCpu()
"""This process's tree: every attempt the process runs counts on from the one before."""


def jvm_heap(jvm: Any) -> tuple[int, int]:
    """(used, max) bytes of the JVM's heap; max is -1 when the JVM sets no limit."""
    usage = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    return int(usage.getUsed()), int(usage.getMax())


class WorkerResources:
    """The resource metrics of one attempt of a stage worker (see the module). ``jvm``: the
    session's py4j view of its JVM (``spark.sparkContext._jvm``), None without a session."""

    def __init__(self, job: JobId, stage: str, jvm: Any, root: int | None = None, cpu: TreeCpu = PROCESS_CPU,
                 proc: Path = PROC) -> None:
        self.job, self.stage = job, stage
        self.jvm = jvm
        self.root = os.getpid() if root is None else root
        self.cpu = cpu
        self.proc = proc
        self._errors: dict[str, str] = {}

    def report(self) -> None:
        self._measured("processes", self._report_processes)
        self._measured("jvm heap", self._report_heap)

    def _report_processes(self) -> None:
        tree = process_tree(self.root, self.proc)
        if not tree:
            raise ProcessLookupError(f"no process {self.root} in {self.proc}")
        CPU_SECONDS.labels(self.job, self.stage).inc(self.cpu.advance(sum(p.cpu_seconds for p in tree)))
        RESIDENT_MEMORY.labels(self.job, self.stage).set(sum(p.rss_bytes for p in tree))

    def _report_heap(self) -> None:
        if self.jvm is None:  # a worker reading only channels starts no JVM
            return
        used, limit = jvm_heap(self.jvm)
        JVM_HEAP_USED.labels(self.job, self.stage).set(used)
        if limit >= 0:
            JVM_HEAP_MAX.labels(self.job, self.stage).set(limit)

    def _measured(self, what: str, sample: Callable[[], None]) -> None:
        try:
            sample()
        except Exception as exc:
            if self._errors.get(what) != str(exc):
                log.warning("worker resources not measured", job=self.job, stage=self.stage, what=what,
                            error=str(exc))
            self._errors[what] = str(exc)
            return
        self._errors.pop(what, None)
