"""Worker processes on worker hosts: the supervisor's side of ``tidemark jobs run --worker-hosts``.

A **worker host** (``tidemark jobs host``, :mod:`tidemark.runtime.placement.worker_host`; in the chart one pod
of a StatefulSet per stage) is named ``<stage>/<n>``: the ``n``-th of the ``W`` workers of one of
the job's stages as its author wrote it. Placement (:func:`host_of`): worker ``w`` of a stage runs
on host ``<stage>/<w>``, and so does worker ``w`` of the stage's exchange reader
(``<stage>.read``, :mod:`tidemark.runtime.job.physical_plan`), so ``W`` hosts per stage run the job.

:class:`HostedWorkers` is the :class:`~tidemark.runtime.placement.pool.WorkerPool` of such hosts, over
the worker-hosts topic (:mod:`tidemark.runtime.placement.host_channel`). What it decides is pure and lives
in :class:`HostLedger`:

* each host of the attempt gets one ``RUN`` (its launches) while it reports (a report in the last
  3 s). Until every host got it, ``waiting_for`` names the others (pods starting or restarting),
  and the supervisor's readiness deadline does not run;
* a process's state is what its host reports for the attempt's epoch;
* a host whose report shows another incarnation than the one its ``RUN`` went to was restarted
  (a pod restart): its processes are gone (``EXITED``, -9). So are those of a host silent for
  ``silence_s`` while the topic delivers: the supervisor writes a ``HEARTBEAT`` every second and
  reads it back, and only silence measured while its own heartbeats come back counts, so a
  broker outage fails nothing over.

The warm standbys are the hosts' own (each keeps one per process of its attempt when the ``RUN``
says so), so ``start_standbys`` has nothing to do here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidemark.chassis.logs import get_logger
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import HostAction, HostAssignment, HostLaunch, HostReport
from tidemark.runtime.job.attempt import Attempt
from tidemark.runtime.placement.host_channel import HostChannel
from tidemark.runtime.job.physical_plan import READER_SUFFIX
from tidemark.runtime.placement.pool import Launch, ProcessPhase, ProcessState
from tidemark.types import Epoch, JobId

log = get_logger(__name__)
HEARTBEAT_S = 1.0  # the supervisor's heartbeat; hosts report as often
SILENCE_S = 15.0  # a host silent this long, while the topic delivers, is lost
ECHO_GAP_S = 3.0  # the supervisor's own heartbeat not back within this: the topic is not delivering
FRESH_S = 3.0  # a host whose newest report is older is not sent a RUN (it may be restarting)


def host_name(stage: str, worker: int) -> str:
    """The worker host of worker ``worker`` of the author's stage ``stage``."""
    return f"{stage}/{worker}"


def host_of(launch: Launch) -> str:
    """Where a process runs: worker ``w`` of stage ``s`` (or of its exchange reader) on ``s/w``."""
    attempt = launch.assignment.attempt
    stage = attempt.stage.removesuffix(READER_SUFFIX)
    return host_name(stage, attempt.worker % max(1, attempt.workers.get(stage, 1)))


@dataclass
class _Host:
    report: HostReport | None = None
    seen_at: float = 0.0  # monotonic time of its newest report
    run_sent_to: str | None = None  # the incarnation the attempt's RUN went to


@dataclass
class HostLedger:
    """The supervisor's view of its hosts (pure; ``now`` is monotonic seconds)."""

    silence_s: float = SILENCE_S
    epoch: Epoch = Epoch(0)
    placement: dict[str, list[Launch]] = field(default_factory=dict)  # host -> its launches
    hosts: dict[str, _Host] = field(default_factory=dict)
    last_echo: float | None = None
    delivering_since: float | None = None  # since when our heartbeats come back without a gap

    def new_attempt(self, epoch: Epoch, launches: Sequence[Launch]) -> None:
        self.epoch = epoch
        self.placement = {}
        for launch in launches:
            self.placement.setdefault(host_of(launch), []).append(launch)
        for host in self.hosts.values():
            host.run_sent_to = None

    def on_report(self, report: HostReport, now: float) -> None:
        host = self.hosts.setdefault(report.host, _Host())
        host.report, host.seen_at = report, now

    def on_echo(self, now: float) -> None:
        if self.last_echo is None or now - self.last_echo > ECHO_GAP_S or self.delivering_since is None:
            self.delivering_since = now
        self.last_echo = now

    def _present(self, name: str, now: float) -> bool:
        host = self.hosts.get(name)
        return host is not None and host.report is not None and now - host.seen_at <= FRESH_S

    def runs_due(self, now: float) -> list[str]:
        """Hosts of the attempt present (reporting now) and not sent its RUN yet; each is marked
        sent to the incarnation reporting."""
        due = []
        for name in self.placement:
            host = self.hosts.get(name)
            if host is not None and host.report is not None and host.run_sent_to is None and self._present(name, now):
                host.run_sent_to = host.report.incarnation
                due.append(name)
        return due

    def waiting_for(self, now: float) -> list[str]:
        """Hosts of the attempt not sent its RUN yet because they are not reporting (a pod
        starting or restarting, or a broker outage)."""
        return sorted(name for name in self.placement
                      if (name not in self.hosts or self.hosts[name].run_sent_to is None)
                      and not self._present(name, now))

    def _delivering(self, now: float) -> bool:
        """The topic has delivered our heartbeats, without a gap, for at least ``silence_s``."""
        return (self.last_echo is not None and self.delivering_since is not None and now - self.last_echo <= ECHO_GAP_S
                and now - self.delivering_since >= self.silence_s)

    def states(self, now: float) -> dict[str, ProcessState]:
        states: dict[str, ProcessState] = {}
        for name, launches in self.placement.items():
            host = self.hosts.get(name)
            gone = ""
            if host is not None and host.run_sent_to is not None and host.report is not None:
                if host.report.incarnation != host.run_sent_to:
                    gone = f"worker host {name} restarted (its processes of attempt {self.epoch} are gone)"
                elif now - host.seen_at > self.silence_s and self._delivering(now):
                    gone = f"worker host {name} lost: no report for {now - host.seen_at:.0f}s"
            reported = {} if host is None or host.report is None or host.report.epoch != self.epoch else {
                p.name: p for p in host.report.processes}
            for launch in launches:
                if gone:
                    states[launch.name] = ProcessState(ProcessPhase.EXITED, -9, gone, f"worker host {name}")
                elif launch.name in reported:
                    p = reported[launch.name]
                    states[launch.name] = ProcessState(p.phase, p.exit_code, p.reason, f"worker host {name}: {p.log}")
                else:
                    states[launch.name] = ProcessState(ProcessPhase.STARTING, log=f"worker host {name}")
        return states


def run_assignment(job_id: JobId, host: str, epoch: Epoch, launches: Sequence[Launch], standby: bool) -> HostAssignment:
    """The RUN of one host: its launches, and what every launch of the attempt shares."""
    first = launches[0].assignment.attempt
    return HostAssignment(job_id, host, epoch, HostAction.RUN, first.job_ref, json.dumps(first.job_args),
                          first.parallelism, first.restore_path, dict(first.workers),
                          tuple(HostLaunch(launch.assignment.attempt.stage, launch.assignment.attempt.worker,
                                           launch.assignment.fault, launch.assignment.attempt.fused)
                                for launch in launches),
                          standby, now_ms())


def hosted_attempt(message: HostAssignment, placed: HostLaunch, run_dir: Path) -> Attempt:
    """What a worker host runs for one launch of a RUN: the attempt :func:`run_assignment` sent."""
    return Attempt(message.job_ref, placed.stage, message.epoch, message.parallelism, run_dir,
                   json.loads(message.job_args), message.restore_path, dict(message.workers), placed.worker,
                   fused=placed.fused)


class HostedWorkers:
    """See the module docstring."""

    def __init__(self, settings: TidemarkSettings, topics: TopicNames, job_id: JobId) -> None:
        self.job_id = job_id
        self.ledger = HostLedger()
        self._channel = HostChannel(base_config(settings), topics, job_id, settings.kafka.replication_factor)
        self._standby = True  # what the RUNs say; each launch sets it
        self._heartbeat_at = 0.0

    def launch(self, launches: Sequence[Launch], *, standby: bool) -> None:
        self._standby = standby
        self.ledger.new_attempt(launches[0].assignment.attempt.epoch, launches)
        log.info("placing the attempt on worker hosts", job=self.job_id, epoch=self.ledger.epoch,
                 hosts={host: [launch.name for launch in placed] for host, placed in self.ledger.placement.items()})
        self._exchange()

    def states(self) -> dict[str, ProcessState]:
        self._exchange()
        return self.ledger.states(time.monotonic())

    def waiting_for(self) -> list[str]:
        return self.ledger.waiting_for(time.monotonic())

    def start_standbys(self) -> None:
        """Nothing: every host keeps its own standbys (the RUN says whether)."""

    def release(self) -> None:
        self.kill(graceful=False)  # KILL: each host releases its processes (runtime.placement.worker_host)

    def kill(self, *, graceful: bool) -> None:
        action = HostAction.STOP if graceful else HostAction.KILL
        self._channel.deliver([HostAssignment(self.job_id, host, self.ledger.epoch, action, issued_at=now_ms())
                                for host in self.ledger.placement])

    def close(self) -> None:
        self._channel.close()

    def _exchange(self) -> None:
        """Read the reports (and our heartbeats back), write the heartbeat when due and each RUN
        that is due."""
        now = time.monotonic()
        for message in self._channel.poll():
            if isinstance(message, HostReport):
                known = self.ledger.hosts.get(message.host)
                if known is None or known.report is None or known.report.incarnation != message.incarnation:
                    log.info("worker host seen", job=self.job_id, host=message.host,
                             incarnation=message.incarnation)
                self.ledger.on_report(message, now)
            elif message.action is HostAction.HEARTBEAT:
                self.ledger.on_echo(now)
        if now - self._heartbeat_at >= HEARTBEAT_S:
            self._heartbeat_at = now
            self._channel.offer(HostAssignment(self.job_id, "", self.ledger.epoch, HostAction.HEARTBEAT,
                                               issued_at=now_ms()))
        due = self.ledger.runs_due(now)
        if due:
            self._channel.deliver([run_assignment(self.job_id, host, self.ledger.epoch, self.ledger.placement[host],
                                                   self._standby) for host in due])
        for host in due:
            log.info("attempt sent to worker host", job=self.job_id, host=host, epoch=self.ledger.epoch,
                     processes=[launch.name for launch in self.ledger.placement[host]])
