"""Watching one attempt of a job until it ends: its worker processes (through the worker pool)
and the control topic (the coordinator failing the attempt over, or a restore issued through
the API replacing it).

:meth:`AttemptWatch.wait_ready` until every process restored and started its query, then
:meth:`AttemptWatch.watch` until the attempt ends. Both return how it ended, one of
:data:`OUTCOMES` (``None`` from ``wait_ready``: ready); :attr:`AttemptWatch.failure` says why a
failed attempt failed, in one line, and :attr:`AttemptWatch.restore` is the restore that replaced
it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tidemark.exit_codes import EXIT_CONFIG, EXIT_REFUSED
from tidemark.protocol.messages import AttemptFailed, RestoreCommand
from tidemark.runtime.job.control import AttemptSignals
from tidemark.runtime.placement.pool import ProcessState, WorkerPool, standbys_due
from tidemark.chassis.logs import get_logger
from tidemark.types import Epoch, JobId

log = get_logger(__name__)

OUTCOMES = ("finished", "stopped", "failed", "not-retryable", "restored")


class AttemptWatch:
    """See the module. ``stopping()``: whether the supervisor got SIGTERM/SIGINT;
    ``standbys_started()``: called once the pool started the warm standbys."""

    def __init__(self, job: JobId, pool: WorkerPool, signals: AttemptSignals, ready_timeout_s: float,
                 stopping: Callable[[], bool], standbys_started: Callable[[], None]) -> None:
        self.job, self.pool, self.signals = job, pool, signals
        self.ready_timeout_s = ready_timeout_s
        self.stopping, self.standbys_started = stopping, standbys_started
        self.failure: str | None = None
        self.restore: RestoreCommand | None = None

    def wait_ready(self, epoch: Epoch) -> str | None:
        deadline = time.monotonic() + self.ready_timeout_s
        logged_waiting = 0.0
        while True:
            if self.stopping():
                return "stopped"
            signalled = self._control_signal(epoch)
            if signalled is not None:
                return signalled
            waiting = self.pool.waiting_for()
            if waiting:  # worker hosts not seen yet (pods starting): no worker started, so no deadline yet
                deadline = time.monotonic() + self.ready_timeout_s
                if time.monotonic() - logged_waiting > 10.0:
                    log.info("waiting for worker hosts", job=self.job, epoch=epoch, hosts=waiting)
                    logged_waiting = time.monotonic()
            states = self.pool.states()
            for name, state in states.items():
                if state.exited:
                    log.error("worker died while starting", job=self.job, stage=name, code=state.exit_code,
                              epoch=epoch, reason=state.reason or None, log_file=state.log)
                    return self._stage_failed(name, state)
            pending = sorted(name for name, state in states.items() if not state.started)
            if not pending:
                return None
            if time.monotonic() > deadline:
                log.error("workers not ready in time", stages=pending)
                self.failure = f"stage(s) {', '.join(pending)} not ready within {self.ready_timeout_s:g}s"
                return "failed"
            time.sleep(0.2)

    def watch(self, epoch: Epoch) -> str:
        registered_at, standbys_started = time.monotonic(), False
        while True:
            if self.stopping():
                return "stopped"
            states = self.pool.states()
            if not standbys_started and standbys_due(states, registered_at, time.monotonic()):
                standbys_started = True
                self.pool.start_standbys()
                self.standbys_started()
            signalled = self._control_signal(epoch)
            if signalled is not None:
                return signalled
            for name, state in states.items():
                if state.exited and state.exit_code != 0:
                    log.error("worker failed", job=self.job, stage=name, code=state.exit_code,
                              epoch=epoch, reason=state.reason or None, log_file=state.log)
                    return self._stage_failed(name, state)
            if all(state.exited for state in states.values()):
                return "finished"
            time.sleep(0.1)

    def _control_signal(self, epoch: Epoch) -> str | None:
        """``failed`` when the coordinator failed this attempt over, ``restored`` when a restore
        of a newer epoch was issued (the restore API), else None."""
        for message in self.signals.poll():
            if isinstance(message, AttemptFailed) and message.epoch == epoch:
                log.error("attempt failed by the coordinator; failing over", job=self.job,
                          epoch=epoch, reason=message.reason)
                self.failure = message.reason
                return "failed"
            if isinstance(message, RestoreCommand) and message.epoch > epoch:
                log.info("restore issued through the API; replacing the attempt", job=self.job,
                         epoch=epoch, restore_epoch=message.epoch, checkpoint=message.checkpoint_id,
                         parallelism=message.parallelism)
                self.restore = message
                return "restored"
        return None

    def _stage_failed(self, stage: str, state: ProcessState) -> str:
        """``not-retryable`` when the stage left a reason a restart will not fix
        (:mod:`tidemark.runtime.job.start_errors`), else ``failed``; the reason goes to ``failure``."""
        if state.exit_code == EXIT_REFUSED and state.reason:
            self.failure = state.reason
            return "not-retryable"
        if state.exit_code == EXIT_CONFIG:
            self.failure = f"stage {stage}: invalid configuration (exit 78; its log: {state.log})"
            return "not-retryable"
        self.failure = state.reason or f"stage {stage} exited with code {state.exit_code} (its log: {state.log})"
        return "failed"
