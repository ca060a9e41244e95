"""Fault campaigns: random SIGKILLs of every process kind and broker pauses while input flows,
each fault's recovery time measured and the read_committed output checked against the input.

Lifecycle: ``plan_faults(kills, pauses, ...)`` draws the faults from a seed ->
``FaultCampaign(home, mode)`` as a context manager starts its own embedded Apache Kafka broker (a
campaign kills and pauses it), the four services and the two-stage example job, and feeds input ->
``inflict(fault)`` per fault, each returning once the job has recovered from it -> ``verdict()``
stops the input and checks the output -> leaving the context stops everything.

A fault, and what brings the killed process back (what Kubernetes or the supervisor does):

- ``minute_counts`` / ``top_urls``: SIGKILL of one live stage worker of that stage; the job's
  supervisor fails the attempt over (the killed share to a warm standby);
- ``supervisor``: SIGKILL of the job's supervisor; the same command line starts again at once
  (as a service manager restarts it) and adopts the attempt the killed one left running
  (:mod:`tidemark.runtime.supervisor.adoption`);
- ``coordinator``, ``checkpoint-store``, ``changelog``, ``materializer``: SIGKILL, then the
  service starts again on its port;
- ``broker``: SIGKILL of the broker, then a start on the same log directory and port;
- ``broker-pause``: SIGSTOP of the broker for ``pause_s``, then SIGCONT.

Recovery is the time from the fault (the kill; the SIGCONT of a pause) to the completion of the
first checkpoint *triggered after it*, read from the coordinator's checkpoint history (its trigger
and completion times), so a checkpoint that was already in flight does not count.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tidemark.admin.client import ApiError
from tidemark.broker.embedded import EmbeddedBroker
from tidemark.clock import now_ms
from tidemark.examples.generator import expected_top_urls
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, wait_for
from tidemark.processes import paused, pid_alive
from tidemark.verification.comparison import Verdict

TOP_URLS = "tidemark.examples.access_log:top_urls"
SERVICES = ("coordinator", "checkpoint-store", "changelog", "materializer")
STAGES = ("minute_counts", "top_urls")
KILL_KINDS = (*STAGES, "supervisor", *SERVICES, "broker")
PAUSE = "broker-pause"
MODES = ("heap", "changelog")
RECOVERY_TIMEOUT_S = 240.0
_MODE_ARGS: dict[str, dict[str, Any]] = {
    "heap": {},
    "changelog": {"changelog": True, "state_backend": "rocksdb"},
}
_ENV = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "1000", "TIDEMARK_MATERIALIZATION__INTERVAL_MS": "3000"}


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # one of KILL_KINDS, or PAUSE
    pause_s: float = 0.0  # how long a broker pause lasts


def plan_faults(kills: int, pauses: int, *, pause_s: tuple[float, float] = (20.0, 60.0),
                seed: int = 1) -> list[Fault]:
    """``kills`` SIGKILLs and ``pauses`` broker pauses in a random order drawn from ``seed``. Every
    process kind is killed once before any is killed again (when ``kills`` allows), then kinds
    are drawn uniformly; a pause lasts a uniform draw from ``pause_s``."""
    rng = random.Random(seed)
    kinds: list[str] = []
    while len(kinds) < kills:
        kinds += rng.sample(KILL_KINDS, len(KILL_KINDS)) if len(kinds) < len(KILL_KINDS) else [rng.choice(KILL_KINDS)]
    faults = [Fault(kind) for kind in kinds[:kills]]
    for _ in range(pauses):
        faults.insert(rng.randint(0, len(faults)), Fault(PAUSE, round(rng.uniform(*pause_s), 1)))
    return faults


@dataclass(frozen=True, slots=True)
class FaultResult:
    fault: Fault
    at_ms: int  # the kill, or the end of a pause (epoch ms)
    recovery_ms: int | None  # None: no checkpoint triggered after the fault completed in time
    detail: str
    failovers: int = 0  # attempts the job's supervisors started from the fault to the recovery


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    kind: str
    count: int
    min_s: float
    median_s: float
    max_s: float


def recovery_stats(results: list[FaultResult]) -> list[RecoveryStats]:
    """Recovery min / median / max per fault kind, in the order of :data:`KILL_KINDS` then pauses."""
    rows = []
    for kind in (*KILL_KINDS, PAUSE):
        seconds = [r.recovery_ms / 1000 for r in results if r.fault.kind == kind and r.recovery_ms is not None]
        if seconds:
            rows.append(RecoveryStats(kind, len(seconds), min(seconds), statistics.median(seconds), max(seconds)))
    return rows


@dataclass
class CampaignReport:
    mode: str
    results: list[FaultResult] = field(default_factory=list)
    records: int = 0
    verdict: Verdict | None = None
    crashes: list[str] = field(default_factory=list)  # processes that exited without being killed


    @property
    def unrecovered(self) -> list[FaultResult]:
        return [r for r in self.results if r.recovery_ms is None]

    @property
    def passed(self) -> bool:
        return self.verdict is not None and self.verdict.exactly_once and not self.unrecovered and not self.crashes

    def table(self) -> str:
        lines = [f"{self.mode} mode: {len(self.results)} faults" + (f", {self.records} input records" if self.records else ""),
                 f"  {'fault':<17}{'n':>4}{'min s':>9}{'median s':>10}{'max s':>9}"]
        lines += [f"  {s.kind:<17}{s.count:>4}{s.min_s:>9.1f}{s.median_s:>10.1f}{s.max_s:>9.1f}"
                  for s in recovery_stats(self.results)]
        lines += [f"  not recovered within {RECOVERY_TIMEOUT_S:.0f}s: {r.fault.kind} ({r.detail})" for r in self.unrecovered]
        lines += [f"  exited without being killed: {crash}" for crash in self.crashes]
        if self.verdict is None:
            lines.append("  output: not checked")
        else:
            v = self.verdict
            lines.append(f"  output: {v.records} minutes closed (expected {v.expected_records}): {v.missing} lost, "
                         f"{v.duplicates} duplicated, {v.wrong_values} wrong, {v.unexpected} unexpected")
            lines += [f"    {line}" for line in v.details]
        return "\n".join(lines)


def _is_stage_process(pid: int, stage: str) -> bool:
    """Whether ``pid`` is a live worker or standby process of ``stage`` (its command line says so)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    return (pid_alive(pid) and "jobs" in argv and ("worker" in argv or "standby" in argv)
            and "--stage" in argv and argv[argv.index("--stage") + 1 : argv.index("--stage") + 2] == [stage])


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class FaultCampaign:
    """One deployment under faults (see the module lifecycle)."""

    def __init__(self, home: Path, mode: str = "heap", *, workers: int = 1, seed: int = 1,
                 progress: Callable[[str], None] = _say) -> None:
        if mode not in _MODE_ARGS:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.home = Path(home)
        self.mode = mode
        self.progress = progress
        self.rng = random.Random(seed)
        self.broker = EmbeddedBroker(self.home / "broker", engine_name="kafka")
        name = f"chaos-{mode}-{seed}-{os.getpid()}"
        self.job_id = name
        self.input, self.channel, self.output = f"{name}-input", f"{name}-minute-counts", f"{name}-top-urls"
        self.job_args = {"job_id": name, "input_topic": self.input, "channel_topic": self.channel,
                         "output_topic": self.output, "workers": workers, **_MODE_ARGS[mode]}
        self.pipe: LocalPipeline | None = None
        self.job: JobRun | None = None
        self.feeder: InputFeeder | None = None
        self._feeding = True
        self.report = CampaignReport(mode)

    # -- set-up ------------------------------------------------------------------------------

    def __enter__(self) -> FaultCampaign:
        status = self.broker.start(tie_to_parent=True)
        assert status.bootstrap_servers
        self.bootstrap = status.bootstrap_servers
        try:
            self.pipe = LocalPipeline(self.pipe_home, self.bootstrap, topic_prefix=f"tm-{self.job_id}",
                                      services=SERVICES, env=_ENV, standby=True).__enter__()
            self.pipe.create_topic(self.input, 4)
            self.job = self.pipe.start_job(TOP_URLS, self.job_args, max_restarts=10_000)
            self.feeder = InputFeeder(self.bootstrap, self.input, total=0, chunk=200, pause_s=1.0,
                                      until=lambda: not self._feeding).start()
            wait_for(self._first_checkpoint, RECOVERY_TIMEOUT_S, "the job's first completed checkpoint")
            self.progress(f"{self.mode}: job running, first checkpoint completed; faults start")
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._feeding = False
        if self.pipe is not None:
            self.pipe.__exit__(exc_type, exc, tb)
        self.broker.stop()

    @property
    def pipe_home(self) -> Path:
        """The deployment's home: its checkpoint storage, logs and run directories."""
        return self.home / "home"

    @property
    def _pipe(self) -> LocalPipeline:
        assert self.pipe is not None, "use the campaign as a context manager"
        return self.pipe

    def _first_checkpoint(self) -> bool:
        return self._pipe.completed_checkpoints(self.job_id) > 0

    # -- faults ------------------------------------------------------------------------------

    def inflict(self, fault: Fault) -> FaultResult:
        """Inflict ``fault``, bring back what was killed, and wait until a checkpoint triggered
        after the fault completed."""
        attempts = self._attempts_started()
        if fault.kind in STAGES:
            at_ms, detail = self._kill_worker(fault.kind)
        elif fault.kind == "supervisor":
            at_ms, detail = self._kill_supervisor()
        elif fault.kind in SERVICES:
            at_ms, detail = self._kill_service(fault.kind)
        elif fault.kind == "broker":
            at_ms, detail = self._kill_broker()
        elif fault.kind == PAUSE:
            at_ms, detail = self._pause_broker(fault.pause_s)
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        recovery_ms = self._recovery_ms(at_ms)
        result = FaultResult(fault, at_ms, recovery_ms, detail, self._attempts_started() - attempts)
        self.report.results.append(result)
        took = "NOT RECOVERED" if recovery_ms is None else f"recovered in {recovery_ms / 1000:.1f}s"
        self.progress(f"{self.mode} fault {len(self.report.results)}: {fault.kind:<16} {detail}: {took}"
                      f"{f' ({result.failovers} failover(s))' if result.failovers else ''}")
        self._note_crashes(f"after fault {len(self.report.results)} ({fault.kind})")
        return result

    def _attempts_started(self) -> int:
        """Attempts every supervisor of the job started so far (an adopted attempt is not one)."""
        return sum(len(job.events("starting attempt")) for job in self._pipe.jobs)

    def _note_crashes(self, when: str) -> None:
        """Services and the supervisor that exited by themselves: a defect, whatever would have
        restarted them in production."""
        assert self.job is not None
        processes = {name: service.process for name, service in self._pipe.cluster.services.items()}
        processes["supervisor"] = self.job.process
        self.report.crashes += [f"{name} (exit {process.returncode}, {when})"
                                for name, process in processes.items() if process.poll() is not None]

    def run(self, faults: list[Fault], gap_s: tuple[float, float] = (0.5, 3.0)) -> CampaignReport:
        """Every fault in turn, a random gap after each recovery; stops at a fault the job does
        not recover from or once a process exited by itself (without a verdict then), else ends
        with :meth:`verdict`."""
        for fault in faults:
            if self.inflict(fault).recovery_ms is None or self.report.crashes:
                return self.report  # the output is not checked: the job is not running
            time.sleep(self.rng.uniform(*gap_s))
        self.verdict()
        return self.report

    def _kill_worker(self, stage: str) -> tuple[int, str]:
        live = wait_for(lambda: self._live_workers(stage), 120, f"a live {stage} worker")
        name, pid = self.rng.choice(sorted(live.items()))
        return self._kill(pid), name

    def _live_workers(self, stage: str) -> dict[str, int]:
        """The live processes running an attempt of ``stage`` (a worker's ready files), by name;
        a pid of an old ready file that another process reuses now (a supervisor started again,
        say) is not one."""
        ready = (json.loads(path.read_text()) for path in self._pipe.home.glob(f"runs/*/{stage}*.epoch-*.ready"))
        return {f"{stage} pid {record['pid']}": record["pid"] for record in ready
                if _is_stage_process(record["pid"], stage)}

    def _kill_supervisor(self) -> tuple[int, str]:
        assert self.job is not None
        pid = self.job.process.pid
        at_ms = self._kill(pid)
        self.job.process.wait()
        self.job = self._pipe.start_job(TOP_URLS, self.job_args, max_restarts=10_000)  # restarted at once
        try:
            wait_for(lambda: self.job.events("adopted the running attempt of a killed supervisor")  # type: ignore
                     or self.job.events("starting attempt"), 60, "the restarted supervisor's first step")  # type: ignore
        except TimeoutError:
            raise AssertionError("the restarted supervisor neither adopted the attempt nor started one") from None
        adopted = bool(self.job.events("adopted the running attempt of a killed supervisor"))
        return at_ms, f"pid {pid}; started again, {'its attempt adopted' if adopted else 'a new attempt (not adopted)'}"

    def _kill_service(self, name: str) -> tuple[int, str]:
        service = self._pipe.cluster.services[name]
        pid = service.process.pid
        at_ms = now_ms()
        self._pipe.restart_service(name)  # SIGKILL, then started again on the same port
        return at_ms, f"pid {pid}; started again"

    def _kill_broker(self) -> tuple[int, str]:
        status = self.broker.status()
        assert status.running and status.pid is not None
        at_ms = self._kill(status.pid)
        wait_for(lambda: not pid_alive(status.pid), 10, "the killed broker gone")  # type: ignore[arg-type]
        self.broker.stop()  # reaps it; the log directory stays
        after = self.broker.start(tie_to_parent=True)
        assert after.port == status.port, (status, after)
        return at_ms, f"pid {status.pid}; started again on port {after.port}"

    def _pause_broker(self, pause_s: float) -> tuple[int, str]:
        status = self.broker.status()
        assert status.running and status.pid is not None
        with paused(status.pid):
            time.sleep(pause_s)
        return now_ms(), f"pid {status.pid} stopped for {pause_s:.0f}s"

    @staticmethod
    def _kill(pid: int) -> int:
        at_ms = now_ms()
        os.kill(pid, signal.SIGKILL)
        return at_ms

    def _recovery_ms(self, at_ms: int) -> int | None:
        """From ``at_ms`` to the completion of the first checkpoint triggered after it."""
        def completed_after() -> int | None:
            try:
                history = self._pipe.client().history(self.job_id)["checkpoints"]
            except ApiError:
                return None  # the coordinator is restarting
            ended = [c["ended_at"] for c in history
                     if c["status"] == "COMPLETED" and c["triggered_at"] >= at_ms and c["ended_at"] is not None]
            return min(ended) - at_ms if ended else None

        try:
            return wait_for(completed_after, RECOVERY_TIMEOUT_S, "a checkpoint triggered after the fault", poll_s=0.2)
        except TimeoutError:
            return None

    # -- the check ---------------------------------------------------------------------------

    def verdict(self) -> Verdict:
        """Stop the input, let two more checkpoints complete, and compare the read_committed
        output with what the input implies (every minute it closes, once, with its exact top URLs)."""
        assert self.feeder is not None
        self._feeding = False
        records = self.feeder.join(timeout_s=120)
        start = self._pipe.completed_checkpoints(self.job_id)
        wait_for(lambda: self._pipe.completed_checkpoints(self.job_id) >= start + 2, RECOVERY_TIMEOUT_S,
                 "two checkpoints after the input stopped")
        expected = expected_top_urls(records)
        output = read_committed(self.bootstrap, self.output, expect=len(expected), timeout_s=RECOVERY_TIMEOUT_S)
        self.report.records = len(records)
        self.report.verdict = verify_top_urls(output, expected)
        return self.report.verdict


__all__ = ["CampaignReport", "Fault", "FaultCampaign", "FaultResult", "KILL_KINDS", "MODES", "PAUSE",
           "plan_faults", "recovery_stats"]
