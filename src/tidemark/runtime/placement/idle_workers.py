"""Idle warm workers: the worker processes a job's run leaves behind for the next job on the machine.

Most of a stage worker's start is its JVM and SparkSession: seconds of CPU. Within a run the
supervisor already keeps them (a released worker takes the next attempt in place, a warm standby a
killed worker's place). With ``TIDEMARK_IDLE_WORKERS__DIR`` set, they also outlive the run:

* **Going idle.** At the end of a run (a stop, or the processes a rescale no longer needs) the
  supervisor (:class:`~tidemark.runtime.placement.local_workers.LocalWorkers`) sends each of its
  processes that holds no attempt (released, or a warm standby) an :class:`IdleOrder`; when the
  supervisor is gone, the process registers ``<dir>/<fingerprint>/<pid>.json`` and waits, at most
  ``keep_s``, on its control FIFO (:mod:`tidemark.runtime.supervisor.adoption`) for a new one.
* **Taking one.** A supervisor about to start a new worker process first :meth:`IdleWorkers.claim`\\ s
  an idle one of its own fingerprint: it renames the registration to ``<pid>.claimed`` (one claimer
  wins), writes ``adopt <its pid>`` and the assignment, carrying the job's ``TIDEMARK_*`` environment
  and log file, to the process's FIFO, and waits for it to accept (it removes the claimed file). The
  process moves its environment, settings, output and metrics to the new job and runs the attempt
  in its started session.
* **Refusing.** A process whose imported code changed on disk since it imported it
  (:mod:`tidemark.runtime.worker.loaded_code`) does not accept: it exits, and the claimer starts a
  new process. An expiring process renames its registration to ``<pid>.expired`` first, so a claim
  and an expiry never both win.
* **Pre-started.** ``tidemark jobs warm-workers`` (:func:`start_warm_workers`) starts worker
  processes with no run at all: each starts its session, runs the warm-up batch and registers as
  an idle worker (:func:`tidemark.runtime.worker.standby.run_standby` with an order), so even the
  first job on the machine starts without a JVM start.
* **The fingerprint** is what a new worker of the job would start its session with (the session's
  options, the Kafka connector's jars, the class archive, ``JAVA_HOME``), the Python executable,
  where it would import the job's code from (``PYTHONPATH`` and the working directory, which a
  worker inherits from its supervisor) and Tidemark's version: an idle worker only serves jobs whose
  own workers would start the same session and import the same modules (an idle worker of a job
  found on another ``PYTHONPATH`` could not import an upgraded job's module).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from tidemark import __version__
from tidemark.config.settings import TidemarkSettings
from tidemark.jvm import find_java_home
from tidemark.processes import process_start_time

IDLE = "idle"  # the line's first word: ``idle <IdleOrder as JSON>``
ACCEPT_WAIT_S = 3.0  # how long a claimer waits for the claimed process to accept


@dataclass(frozen=True)
class IdleOrder:
    """Where a process goes idle when its supervisor lets it go, for how long, and as what."""

    dir: str
    keep_s: float
    fingerprint: str

    def to_line(self) -> bytes:
        return f"{IDLE} {json.dumps(asdict(self))}\n".encode()

    @classmethod
    def from_text(cls, text: str) -> IdleOrder:
        doc = json.loads(text)
        return cls(str(doc["dir"]), float(doc["keep_s"]), str(doc["fingerprint"]))


@dataclass(frozen=True)
class IdleWorker:
    """One registered idle process: who it is and where its lines go."""

    pid: int
    start_time: int
    fifo: str

    def alive(self) -> bool:
        return process_start_time(self.pid) == self.start_time


def run_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that move with a worker taken into another run: Tidemark's
    settings (``TIDEMARK_*``) and ``KAFKA_BOOTSTRAP_SERVERS``."""
    return {k: v for k, v in environ.items() if k.startswith("TIDEMARK_") or k == "KAFKA_BOOTSTRAP_SERVERS"}


def session_fingerprint(settings: TidemarkSettings) -> str:
    """What a new stage worker under ``settings`` would start its SparkSession with, hashed."""
    from tidemark.runtime.worker.query import session_options
    from tidemark.spark.stage_source import stage_source

    source = stage_source(settings)
    options = asdict(session_options(settings, "", source))
    options.pop("app_name")
    doc = {"session": options, "format": source.format, "python": sys.executable, "tidemark": __version__,
           "java_home": find_java_home(), "import_path": [os.environ.get("PYTHONPATH", ""), os.getcwd()]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def idle_order(settings: TidemarkSettings) -> IdleOrder | None:
    """What a run under ``settings`` tells its processes at its end; None when idle workers are off."""
    idle = settings.idle_workers
    return None if idle.dir is None else IdleOrder(str(idle.dir), idle.keep_s, session_fingerprint(settings))


class IdleWorkers:
    """The registrations under one directory (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)

    def _path(self, fingerprint: str, pid: int, state: str = "json") -> Path:
        return self.dir / fingerprint / f"{pid}.{state}"

    # ------------------------------------------------------------------ the idle process's side

    def register(self, fingerprint: str, worker: IdleWorker) -> None:
        path = self._path(fingerprint, worker.pid)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(worker)), encoding="utf-8")
        os.replace(temporary, path)

    def withdraw(self, fingerprint: str, pid: int) -> bool:
        """Take the registration back (the process stops waiting); False when a claimer took it first."""
        try:
            os.rename(self._path(fingerprint, pid), self._path(fingerprint, pid, "expired"))
        except FileNotFoundError:
            return False
        self._path(fingerprint, pid, "expired").unlink(missing_ok=True)
        return True

    def accept(self, fingerprint: str, pid: int) -> bool:
        """Accept a claim; False when there was none (nothing to accept)."""
        try:
            self._path(fingerprint, pid, "claimed").unlink()
        except FileNotFoundError:
            return False
        return True

    # ------------------------------------------------------------------ the claiming supervisor's side

    def waiting(self, fingerprint: str) -> list[IdleWorker]:
        """The registered processes still alive (registrations of dead ones are removed)."""
        found = []
        for path in sorted((self.dir / fingerprint).glob("*.json")):
            worker = _read(path)
            if worker is not None and worker.alive():
                found.append(worker)
            elif worker is not None or time.time() - _mtime(path) > 10:  # unreadable: maybe being written
                path.unlink(missing_ok=True)
        return found

    def claim(self, fingerprint: str) -> IdleWorker | None:
        """One registered live process, now claimed (its registration renamed), or None."""
        for worker in self.waiting(fingerprint):
            try:
                os.rename(self._path(fingerprint, worker.pid), self._path(fingerprint, worker.pid, "claimed"))
            except FileNotFoundError:  # another claimer, or it expired
                continue
            if worker.alive():
                return worker
            self._path(fingerprint, worker.pid, "claimed").unlink(missing_ok=True)
        return None

    def accepted(self, fingerprint: str, worker: IdleWorker, timeout_s: float = ACCEPT_WAIT_S) -> bool:
        """Wait until the claimed process accepted (True), refused or died (False)."""
        claimed = self._path(fingerprint, worker.pid, "claimed")
        deadline = time.monotonic() + timeout_s
        while claimed.exists():
            if not worker.alive() or time.monotonic() > deadline:
                claimed.unlink(missing_ok=True)
                return False
            time.sleep(0.02)
        return worker.alive()


class WarmWorkersFailed(RuntimeError):
    """A pre-started worker exited, or they were not all warm in time (the others are killed)."""


def start_warm_workers(order: IdleOrder, count: int, wait_s: float,
                       progress: Callable[[int], None] = lambda warm: None) -> list[int]:
    """Start ``count`` worker processes that go idle under ``order`` once their session is warm
    (see the module docstring) and wait until all have registered; their pids. They outlive the
    caller (a session of their own), their output in ``<dir>/logs/``, their control FIFOs in
    ``<dir>/control/``. ``progress`` gets how many are warm, every 5 s."""
    directory = Path(order.dir)
    (directory / "logs").mkdir(parents=True, exist_ok=True)
    started: list[subprocess.Popen[bytes]] = []
    for index in range(count):
        command = [sys.executable, "-m", "tidemark.cli", "jobs", "standby", "--stage", "warm",
                   "--control-dir", str(directory / "control"), "--idle-order", json.dumps(asdict(order))]
        with open(directory / "logs" / f"warm-{os.getpid()}-{index}.log", "ab") as out:
            started.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True))
    pids, pool = {p.pid for p in started}, IdleWorkers(directory)
    reported = time.monotonic()
    deadline = reported + wait_s
    while len(warm := pids & {w.pid for w in pool.waiting(order.fingerprint)}) < count:
        dead = [p for p in started if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            for p in started:
                if p.poll() is None:
                    p.kill()
            raise WarmWorkersFailed(f"{len(dead)} of them exited (status {dead[0].returncode})" if dead else
                                    f"not all warm within {wait_s:g} s")
        if time.monotonic() - reported >= 5:
            progress(len(warm))
            reported = time.monotonic()
        time.sleep(0.2)
    return sorted(pids)


def _read(path: Path) -> IdleWorker | None:
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        doc = json.loads(path.read_text(encoding="utf-8"))
        return IdleWorker(int(doc["pid"]), int(doc["start_time"]), str(doc["fifo"]))
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
