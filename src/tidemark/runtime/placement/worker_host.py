"""A worker host: ``tidemark jobs host``, one pod of a job's stage, running what its supervisor places there.

A job run with ``tidemark jobs run --worker-hosts`` starts no worker process itself: each runs on
the worker host ``<stage>/<n>`` (:mod:`tidemark.runtime.placement.hosted_workers`), in the chart pod ``n`` of
the stage's StatefulSet. The host:

1. follows the job's worker-hosts topic (:mod:`tidemark.runtime.placement.host_channel`) from its end, and
   reports every second (:class:`~tidemark.protocol.messages.HostReport`): its incarnation (new at
   each start, so a restarted pod is told from a live one) and where each of its processes is;
2. on a ``RUN`` of a newer attempt, releases what it runs and starts the attempt's processes
   placed on it with a :class:`~tidemark.runtime.placement.local_workers.LocalWorkers` (the released
   processes and its warm standby first), and logs which tasks each owns; on ``STOP`` of its
   attempt, ends them, on ``KILL`` (a failover) releases them;
3. once its processes process records (or 30 s after the RUN; ``runtime.placement.pool.standbys_due``)
   starts one warm standby for the next attempt, when the RUN asks for standbys.

Nothing is decided here: failover, restore sources and epochs stay with the supervisor, which
fails the attempt over when a host restarts or falls silent. With ``TIDEMARK_HTTP_PORT`` set the
host serves ``/livez``, ``/readyz`` and ``/metrics`` there, and its ``i``-th process of an attempt
serves its metrics on that port + 1 + i; ``/targets`` lists the ports its processes serve now, for
Prometheus's HTTP service discovery (:mod:`tidemark.runtime.job.health`). A host runs one process
or two (worker ``n`` of its stage, and of the stage's exchange reader when the stage has one and
that reader has an ``n``-th worker), or none when the stage has fewer workers than hosts.
SIGTERM/SIGINT end its processes and return 143/130.
"""

from __future__ import annotations

import signal
import time
import uuid
from typing import Any

from tidemark.chassis.logs import get_logger
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.outage import BrokerWatch
from tidemark.kafka.topics import TopicNames
from tidemark.processes import free_port
from tidemark.protocol.messages import HostAction, HostAssignment, HostedProcess, HostReport
from tidemark.runtime.job.health import serve_health
from tidemark.runtime.placement.host_channel import HostChannel
from tidemark.runtime.placement.hosted_workers import hosted_attempt
from tidemark.runtime.placement.local_workers import LocalWorkers
from tidemark.runtime.job.ownership import subtasks_of
from tidemark.runtime.job.attempt import Assignment, process_name
from tidemark.runtime.placement.pool import Launch, standbys_due
from tidemark.types import Epoch, JobId

log = get_logger(__name__)
REPORT_S = 1.0


class WorkerHost:
    """See the module docstring."""

    def __init__(self, settings: TidemarkSettings, job_id: JobId, stage: str, worker: int) -> None:
        self.settings = settings
        self.job_id = job_id
        self.host = f"{stage}/{worker}"
        self.incarnation = uuid.uuid4().hex[:12]
        self.run_dir = settings.home / "runs" / f"{job_id}-host-{stage}-{worker}-{self.incarnation}"
        self.workers = LocalWorkers(self.run_dir)
        self.epoch = Epoch(0)
        self._launched_at: float | None = None  # of the attempt whose standbys are not started yet
        self._stop_signal: int | None = None
        self._channel: HostChannel | None = None

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        if self.settings.http_port:
            serve_health(self.settings.http_host, self.settings.http_port, lambda: self._channel is not None,
                         targets=self.workers.metrics_ports)
        BrokerWatch(base_config(self.settings)).start()  # says in the log while the broker is unreachable
        self._channel = HostChannel(base_config(self.settings), TopicNames(self.settings.topic_prefix), self.job_id,
                                    self.settings.kafka.replication_factor)
        log.info("worker host started; waiting for its supervisor", job=self.job_id, host=self.host,
                 incarnation=self.incarnation, run_dir=str(self.run_dir))
        reported: tuple[Any, ...] = ()
        reported_at = 0.0
        try:
            while self._stop_signal is None:
                for message in self._channel.poll():
                    if isinstance(message, HostAssignment) and message.host == self.host:
                        self._on_assignment(message)
                states = self.workers.states()
                processes = tuple(HostedProcess(name, s.phase, s.exit_code, s.reason, s.log)
                                  for name, s in states.items())
                now = time.monotonic()
                if processes != reported or now - reported_at >= REPORT_S:
                    self._channel.offer(HostReport(self.job_id, self.host, self.incarnation, self.epoch, processes,
                                                   now_ms()))
                    reported, reported_at = processes, now
                if self._launched_at is not None and states and standbys_due(states, self._launched_at, now):
                    self._launched_at = None
                    self.workers.start_standbys()  # if the RUN asked for standbys
                time.sleep(0.1)
        finally:
            self.workers.kill(graceful=self._stop_signal is not None)
            self.workers.close()
            self._channel.close()
        log.info("worker host stopped", job=self.job_id, host=self.host)
        return 130 if self._stop_signal == signal.SIGINT else 143

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signum

    def _on_assignment(self, message: HostAssignment) -> None:
        if message.action is HostAction.RUN and message.epoch > self.epoch:
            self.workers.release()  # an older attempt's, if any: its processes take this one
            self.epoch = message.epoch
            launches = self._launches(message)
            self.workers.launch(launches, standby=message.standby)
            self._launched_at = time.monotonic()
            for launch in launches:
                attempt = launch.assignment.attempt
                tasks = subtasks_of(attempt.worker, attempt.parallelism, attempt.workers.get(attempt.stage, 1))
                log.info("worker host runs", job=self.job_id, host=self.host, epoch=self.epoch, process=launch.name,
                         stage=attempt.stage, tasks=f"{tasks.start}..{tasks.stop - 1} of {attempt.parallelism}",
                         restore=attempt.restore_path, pid=self.workers.pid(launch.name))
        elif message.action in (HostAction.STOP, HostAction.KILL) and message.epoch == self.epoch:
            log.info("worker host ends its processes", job=self.job_id, host=self.host, epoch=self.epoch,
                     action=message.action.value)
            if message.action is HostAction.STOP:
                self.workers.kill(graceful=True)
            else:  # a failover: the processes end the attempt in place, for the next RUN
                self.workers.release()
            self._launched_at = None

    def _launches(self, message: HostAssignment) -> list[Launch]:
        launches = []
        for i, placed in enumerate(message.launches):
            port = self.settings.http_port + 1 + i if self.settings.http_port else free_port()
            attempt = hosted_attempt(message, placed, self.run_dir)
            name = process_name(placed.stage, placed.worker, message.workers.get(placed.stage, 1))
            launches.append(Launch(name, Assignment(attempt, placed.fault, port)))
        return launches
