"""One stage worker process across attempts: the attempt it was started for (or handed, as a warm
standby), then, after each failover that released it, the next one, in the same SparkSession.

At a global failover only the failed process needs a new JVM. The supervisor *releases* the
others (:meth:`tidemark.runtime.local_workers.LocalWorkers.release`): each ends its attempt in
place (its query stopped, its state, Kafka clients and sink transaction closed; what that
attempt did after its last completed checkpoint is rolled back by the restore, exactly as when
the process is killed), keeps its started SparkSession, and takes the next attempt as a warm
standby does: restoring from the same checkpoint as every other process, in seconds instead of a
JVM start.

The supervisor talks to the process through its standard input, one line per message
(:class:`SupervisorLines`):

* an :class:`~tidemark.runtime.stage_attempt.Assignment` (JSON): run this attempt;
* ``release <epoch>``: end attempt ``epoch`` and keep the process; once it has ended, the process
  writes the attempt's ``released`` file (:attr:`Attempt.released_file`) and waits for the next
  assignment;
* end of input (the supervisor is gone, or does not need the process): a waiting process exits 0;
  a running attempt goes on (the process dies with its parent anyway, ``processes.die_with_parent``).
"""

from __future__ import annotations

import gc
import json
import queue
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from tidemark.chassis.logs import get_logger
from tidemark.config.settings import TidemarkSettings
from tidemark.runtime.faults import FAULTS
from tidemark.runtime.health import serve_health
from tidemark.runtime.query import run_attempt
from tidemark.runtime.stage_attempt import RELEASE, Assignment, Attempt

log = get_logger(__name__)


class SupervisorLines(threading.Thread):
    """Reads what the supervisor writes to the process (see the module docstring)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        super().__init__(name="supervisor-lines", daemon=True)
        self.stream = stream if stream is not None else sys.stdin
        self.arrived = threading.Event()  # an assignment (or the end of input) waits to be taken
        self._assignments: queue.Queue[Assignment | None] = queue.Queue()
        self._released_up_to = 0  # the newest epoch released

    def run(self) -> None:
        for line in self.stream:
            text = line.strip()
            if not text:
                continue
            word, _, epoch = text.partition(" ")
            if word == RELEASE and epoch.isdigit():
                self._released_up_to = max(self._released_up_to, int(epoch))
                continue
            try:
                self._assignments.put(Assignment.from_line(text))
            except (ValueError, KeyError, TypeError) as exc:  # the supervisor's own lines: a bug, not input
                log.error("line from the supervisor not understood; ignored", line=text[:200], error=str(exc))
                continue
            self.arrived.set()
        self._assignments.put(None)
        self.arrived.set()

    def released(self, epoch: int) -> bool:
        """Whether the supervisor released attempt ``epoch``."""
        return self._released_up_to >= epoch

    def next_assignment(self) -> Assignment | None:
        """The next attempt to run (blocks); None at the end of input."""
        assignment = self._assignments.get()
        if self._assignments.empty():
            self.arrived.clear()
        if assignment is None:
            self._assignments.put(None)  # the end stays the end
        return assignment


class StageProcess:
    """Runs attempts in one process (see the module docstring); ``spark``: a warm standby's session."""

    def __init__(self, settings: TidemarkSettings, lines: SupervisorLines, spark: Any = None) -> None:
        self.settings = settings
        self.lines = lines
        self.spark = spark
        self._health: ThreadingHTTPServer | None = None
        self._health_port: int | None = None
        self._ready_file: Path | None = None

    def run(self, attempt: Attempt | None) -> int:
        """Run ``attempt`` (None: the first assignment read), and the next one after each
        release; the exit status of the last attempt, or 0 when no next one comes."""
        settings = self.settings
        while True:
            if attempt is None:
                assignment = self.lines.next_assignment()
                if assignment is None:
                    log.info("no attempt to take; exiting")
                    return self._exit(0)
                FAULTS.configure(assignment.fault)
                settings = (self.settings if assignment.http_port is None else
                            self.settings.model_copy(update={"http_port": assignment.http_port}))
                attempt = assignment.attempt
                log.info("taking the attempt", stage=attempt.stage, worker=attempt.worker, epoch=attempt.epoch,
                         restore=attempt.restore_path, warm=self.spark is not None)
            self._serve_health(settings, attempt)
            epoch = attempt.epoch
            ended = run_attempt(settings, attempt, self.spark, lambda: self.lines.released(epoch))
            if ended.spark is None:  # run_attempt stopped the session
                self.spark = None
                return ended.code
            self.spark = ended.spark
            gc.collect()  # the ended attempt's Kafka clients and state handles, held in reference cycles
            attempt.released_file.parent.mkdir(parents=True, exist_ok=True)
            attempt.released_file.write_text(json.dumps({"epoch": epoch}))
            log.info("attempt released; the process waits for the next", stage=attempt.stage,
                     worker=attempt.worker, epoch=epoch)
            attempt = None

    def _serve_health(self, settings: TidemarkSettings, attempt: Attempt) -> None:
        """``/readyz`` answers for the running attempt; a new port moves the server there."""
        self._ready_file = attempt.ready_file
        if not settings.http_port or settings.http_port == self._health_port:
            return
        if self._health is not None:
            self._health.shutdown()
            self._health.server_close()
        self._health = serve_health(settings.http_host, settings.http_port,
                                    lambda: self._ready_file is not None and self._ready_file.exists())
        self._health_port = settings.http_port

    def _exit(self, code: int) -> int:
        if self.spark is not None:  # released, and no next attempt came
            self.spark.stop()
            self.spark = None
        return code
