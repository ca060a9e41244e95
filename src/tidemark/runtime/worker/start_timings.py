"""How long an attempt of a stage worker took to start, step by step (the start-up breakdown).

Lifecycle: one :class:`StartTimings` per attempt, made when the attempt begins; ``mark(step)`` as
each step ends (the first mark of a step counts); when the first micro-batch with records is
processed, ``report()`` logs ``attempt started up`` once with the seconds of each step since the
one before, and since the process started (its Python start and imports, before the attempt):

* ``process_s``: from the process's start to the attempt's (a warm process: its previous attempt
  and its wait too, so it is given for a fresh process only);
* ``restore_s``: wiring the attempt and restoring its state (``runtime.worker.bootstrap``);
* ``session_s``: waiting for the SparkSession started meanwhile (0 when it was ready or given);
* ``query_s``: starting the streaming query (its steps prepared, the source planned);
* ``first_fetch_s``: until Spark handed over the first micro-batch with records (reading Kafka,
  converting to Arrow; a cold JVM's first batch costs most);
* ``first_process_s``: processing it (decode, key, state, output).
"""

from __future__ import annotations

import os
import time
from typing import Any

from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
STEPS = ("restore", "session", "query", "first_fetch", "first_process")


def _process_age_s() -> float | None:
    """Seconds since this process started (Linux ``/proc``), None where that is not known."""
    try:
        with open(f"/proc/{os.getpid()}/stat", encoding="ascii") as stat:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            up_s = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return up_s - started_ticks / os.sysconf("SC_CLK_TCK")


class StartTimings:
    """The start-up steps of one attempt (see the module)."""

    def __init__(self, fresh_process: bool) -> None:
        self.began = time.monotonic()
        age = _process_age_s() if fresh_process else None
        self.process_s = round(age, 3) if age is not None else None
        self.marks: dict[str, float] = {}
        self.reported = False

    def mark(self, step: str) -> None:
        assert step in STEPS, step
        self.marks.setdefault(step, time.monotonic())

    def breakdown(self) -> dict[str, Any]:
        """Each marked step's seconds since the step before (or the attempt's start), in order."""
        found: dict[str, Any] = {"process_s": self.process_s}
        before = self.began
        for step in STEPS:
            if step in self.marks:
                found[f"{step}_s"] = round(self.marks[step] - before, 3)
                before = self.marks[step]
        found["total_s"] = round(before - self.began, 3)
        return found

    def report(self, **fields: Any) -> None:
        """Log the breakdown once."""
        if not self.reported:
            self.reported = True
            log.info("attempt started up", **fields, **self.breakdown())
