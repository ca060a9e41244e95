"""One stage worker process across attempts: the attempt it was started for (or handed, as a warm
standby), then, after each failover that released it, the next one, in the same SparkSession (a
stage that reads only channels runs without one: :mod:`tidemark.runtime.worker.query`).

At a global failover only the failed process needs a new JVM. The supervisor *releases* the
others (:meth:`tidemark.runtime.placement.local_workers.LocalWorkers.release`): each ends its attempt in
place (its query stopped, its state, Kafka clients and sink transaction closed; what that
attempt did after its last completed checkpoint is rolled back by the restore, exactly as when
the process is killed), keeps its started SparkSession, and takes the next attempt as a warm
standby does: restoring from the same checkpoint as every other process, in seconds instead of a
JVM start.

The supervisor talks to the process through its standard input, one line per message
(:class:`SupervisorLines`):

* an :class:`~tidemark.runtime.job.attempt.Assignment` (JSON): run this attempt;
* ``release <epoch>``: end attempt ``epoch`` and keep the process; once it has ended, the process
  writes the attempt's ``released`` file (:attr:`Attempt.released_file`) and waits for the next
  assignment;
* end of input (the supervisor is gone, or does not need the process): a waiting process exits 0;
  a running attempt goes on (a worker host's process dies with its parent, ``processes.die_with_parent``),
  except for a process whose supervisor lets it be adopted (started with ``--control-dir``,
  :mod:`tidemark.runtime.supervisor.adoption`): it waits ``adoption_window_s`` for ``adopt <pid>`` on its
  control FIFO, running its attempt meanwhile, then reads its adopter's lines there for as long
  as the adopter lives; not adopted in time, it ends its attempt and exits 0.
* ``idle <order>``: once the supervisor is gone, join the idle workers another job may take
  (:mod:`tidemark.runtime.placement.idle_workers`) instead of exiting: the process registers there
  and waits on its control FIFO; a claimer's assignment carries the new job's environment and log
  file, and the process moves to them (:meth:`StageProcess.move_to`).
"""

from __future__ import annotations

import collections
import gc
import json
import os
import queue
import select
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from tidemark.chassis.logs import configure_logging, get_logger
from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.exit_codes import EXIT_CONFIG
from tidemark.processes import process_start_time
from tidemark.runtime.job.metrics import clear_worker_metrics
from tidemark.runtime.placement.idle_workers import (
    ACCEPT_WAIT_S,
    IDLE,
    IdleOrder,
    IdleWorker,
    IdleWorkers,
    run_variables,
)
from tidemark.runtime.worker import loaded_code
from tidemark.runtime.supervisor.adoption import ADOPT, control_fifo, exited_file
from tidemark.runtime.job.faults import FAULTS
from tidemark.runtime.job.health import serve_health
from tidemark.runtime.worker.query import run_attempt
from tidemark.runtime.job.attempt import RELEASE, Assignment, Attempt

log = get_logger(__name__)


class SupervisorLines(threading.Thread):
    """Reads what the supervisor writes to the process (see the module docstring). ``control_dir``:
    where the process's control FIFO goes, None when it is not to be adopted;
    ``adoption_window_s``: how long it waits for an adopter."""

    def __init__(self, stream: IO[str] | None = None, *, control_dir: Path | None = None,
                 adoption_window_s: float = 30.0) -> None:
        super().__init__(name="supervisor-lines", daemon=True)
        self.stream = stream if stream is not None else sys.stdin
        self.arrived = threading.Event()  # an assignment (or the end of input) waits to be taken
        self._assignments: queue.Queue[Assignment | None] = queue.Queue()
        self._released_up_to = 0  # the newest epoch released
        self.adoption_window_s = adoption_window_s
        self._adopter: tuple[int, int | None] = (0, None)  # pid and start time of the adopting supervisor
        self._pending = b""  # a FIFO line not complete yet
        self._lines: collections.deque[str] = collections.deque()  # complete FIFO lines not taken yet
        self._fifo: Path | None = None
        self._fifo_fd: int | None = None
        self._idle: IdleOrder | None = None  # where to go idle once the supervisor is gone
        if control_dir is not None:  # opened now, so an adopter can open it for writing at any time
            control_dir.mkdir(parents=True, exist_ok=True)
            self._fifo = control_fifo(control_dir, os.getpid())
            self._fifo.unlink(missing_ok=True)
            os.mkfifo(self._fifo, 0o600)
            self._fifo_fd = os.open(self._fifo, os.O_RDWR | os.O_NONBLOCK)

    def run(self) -> None:
        for line in self.stream:
            self._take(line)
        while self._fifo_fd is not None and (self._taken_from_idle() if self._idle else self._adopted()):
            self._follow_adopter()
        if self._fifo is not None:
            self._fifo.unlink(missing_ok=True)
        self._assignments.put(None)
        self.arrived.set()

    def _take(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        word, _, epoch = text.partition(" ")
        if word == RELEASE and epoch.isdigit():
            self._released_up_to = max(self._released_up_to, int(epoch))
            return
        if word == IDLE:
            try:
                self._idle = IdleOrder.from_text(epoch)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("idle line from the supervisor not understood; ignored", line=text[:200], error=str(exc))
            return
        try:
            self._assignments.put(Assignment.from_line(text))
        except (ValueError, KeyError, TypeError) as exc:  # the supervisor's own lines: a bug, not input
            log.error("line from the supervisor not understood; ignored", line=text[:200], error=str(exc))
            return
        self.arrived.set()

    # ------------------------------------------------------------------ adoption

    def _adopted(self) -> bool:
        """Wait for ``adopt <pid>`` on the FIFO; False (and the running attempt released) when
        none comes within the window."""
        log.warning("the supervisor is gone; waiting for a restarted one to adopt the process",
                    pid=os.getpid(), window_s=self.adoption_window_s)
        deadline = time.monotonic() + self.adoption_window_s
        while time.monotonic() < deadline:
            self._read_fifo(min(0.2, max(0.0, deadline - time.monotonic())))
            while self._lines:  # lines before the adoption are a dead adopter's: dropped
                word, _, pid = self._lines.popleft().strip().partition(" ")
                if word == ADOPT and pid.isdigit():
                    self._adopter = (int(pid), process_start_time(int(pid)))
                    log.info("adopted by a restarted supervisor", pid=os.getpid(), supervisor=int(pid))
                    return True
        log.warning("no supervisor adopted the process; ending its attempt", pid=os.getpid(),
                    window_s=self.adoption_window_s)
        self._released_up_to = 1 << 62
        return False

    def _taken_from_idle(self) -> bool:
        """Wait, registered as an idle worker, for another job's supervisor to claim the process;
        False (the process exits) when none does within the order's ``keep_s``, or when the code
        it imported changed since (it would run the new job with the old code)."""
        order, pid = self._idle, os.getpid()
        assert order is not None and self._fifo is not None
        pool = IdleWorkers(Path(order.dir))
        loaded_code.note()
        if (stale := loaded_code.changed()) is not None:
            log.info("the code the process imported changed; not going idle", file=stale)
            return False
        pool.register(order.fingerprint, IdleWorker(pid, process_start_time(pid) or 0, str(self._fifo)))
        log.info("idle; waiting for another run to take the process", dir=order.dir, keep_s=order.keep_s)
        deadline, withdrawn = time.monotonic() + order.keep_s, False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if withdrawn or pool.withdraw(order.fingerprint, pid):
                    log.info("not taken; exiting", waited_s=order.keep_s)
                    return False
                withdrawn, deadline = True, time.monotonic() + ACCEPT_WAIT_S  # claimed just now: its lines come
                continue
            self._read_fifo(min(0.2, remaining))
            while self._lines:  # lines before the claim are a gone supervisor's: dropped
                word, _, adopter = self._lines.popleft().strip().partition(" ")
                if word != ADOPT or not adopter.isdigit():
                    continue
                stale = loaded_code.changed()
                if stale is not None or not pool.accept(order.fingerprint, pid):
                    log.info("claim refused: the code the process imported changed" if stale else
                             "claim given up by its supervisor", file=stale)
                    return False
                self._adopter = (int(adopter), process_start_time(int(adopter)))
                self._idle, self._released_up_to = None, 0  # another job: its epochs count anew
                log.info("taken by another run's supervisor", supervisor=int(adopter))
                return True

    def _follow_adopter(self) -> None:
        """Take the adopter's lines until it dies."""
        pid, started = self._adopter
        while started is not None and process_start_time(pid) == started:
            while self._lines:
                self._take(self._lines.popleft())
            self._read_fifo(0.2)

    def _read_fifo(self, timeout_s: float) -> None:
        """Add the complete lines the FIFO holds (waiting ``timeout_s`` at most) to ``_lines``."""
        assert self._fifo_fd is not None
        readable, _, _ = select.select([self._fifo_fd], [], [], timeout_s)
        if not readable:
            return
        chunk = b""
        while True:
            try:
                data = os.read(self._fifo_fd, 65536)
            except BlockingIOError:
                data = b""
            if not data:
                break
            chunk += data
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        self._lines.extend(line.decode("utf-8", "replace") for line in lines)

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
        self._last: Attempt | None = None  # the newest attempt run
        loaded_code.note()

    def run(self, attempt: Attempt | None) -> int:
        """Run ``attempt`` (None: the first assignment read), and the next one after each
        release; the exit status of the last attempt, or 0 when no next one comes. An error that
        escapes an attempt still leaves the exit status (1) in the attempt's ``exited`` file: a
        supervisor that is not the process's parent would otherwise take its death for a SIGKILL."""
        try:
            return self._run(attempt)
        except BaseException as exc:
            code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
            if not isinstance(exc, SystemExit):
                log.error("the attempt ended on an error; the process exits", error=repr(exc), exit_code=code)
            self._write_exited(code)
            raise

    def _run(self, attempt: Attempt | None) -> int:
        settings = self.settings
        while True:
            if attempt is None:
                assignment = self.lines.next_assignment()
                if assignment is None:
                    log.info("no attempt to take; exiting")
                    return self._exit(0)
                if assignment.env is not None and (code := self.move_to(assignment)) is not None:
                    return self._exit(code)
                FAULTS.configure(assignment.fault)
                settings = (self.settings if assignment.http_port is None else
                            self.settings.model_copy(update={"http_port": assignment.http_port}))
                attempt = assignment.attempt
                log.info("taking the attempt", stage=attempt.stage, worker=attempt.worker, epoch=attempt.epoch,
                         restore=attempt.restore_path, warm=self.spark is not None)
            self._serve_health(settings, attempt)
            self._last = attempt
            epoch = attempt.epoch
            ended = run_attempt(settings, attempt, self.spark, lambda: self.lines.released(epoch))
            if not ended.released:  # run_attempt stopped the session
                self.spark = None
                return self._exit(ended.code)
            self.spark = ended.spark
            gc.collect()  # the ended attempt's Kafka clients and state handles, held in reference cycles
            attempt.released_file.parent.mkdir(parents=True, exist_ok=True)
            attempt.released_file.write_text(json.dumps({"epoch": epoch}))
            log.info("attempt released; the process waits for the next", stage=attempt.stage,
                     worker=attempt.worker, epoch=epoch)
            attempt = None

    def move_to(self, assignment: Assignment) -> int | None:
        """Take the environment, settings, log file and metrics of another job's run (an idle
        worker taken, :mod:`tidemark.runtime.placement.idle_workers`); an exit status when its
        settings do not load (they name the key, as a new worker's would)."""
        assert assignment.env is not None
        for key in run_variables(os.environ):
            del os.environ[key]
        os.environ.update(assignment.env)
        if assignment.log:
            Path(assignment.log).parent.mkdir(parents=True, exist_ok=True)
            sys.stdout.flush()
            sys.stderr.flush()
            out = os.open(assignment.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.dup2(out, 1)  # the JVM's output too
            os.dup2(out, 2)
            os.close(out)
        try:
            self.settings = load_settings(TidemarkSettings)
        except ConfigurationError as exc:
            print(f"tidemark worker: {exc}", file=sys.stderr, flush=True)
            return EXIT_CONFIG
        configure_logging(self.settings.log_level, service="worker")
        self.lines.adoption_window_s = self.settings.adoption_window_s
        clear_worker_metrics()  # the earlier job's series
        log.info("an idle worker of an earlier run takes this run's attempt", pid=os.getpid())
        return None

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
        self._write_exited(code)
        return code

    def _write_exited(self, code: int) -> None:
        """The exit status, for a supervisor that adopted the process (not its parent)."""
        if self._last is not None:
            try:
                exited_file(self._last.run_dir, self._last.process, self._last.epoch).write_text(str(code))
            except OSError:
                pass
