"""Which state each attempt of a run restores: Flink's Kubernetes operator's start semantics.

``AttemptPlanner(...)`` is made once per run (``tidemark jobs run``) and asked for each attempt:

* :meth:`AttemptPlanner.first`: by default the newest retained checkpoint or savepoint of the job
  (last state); the one the options name, unless the job already has newer state (a restart of a
  run that began there); nothing with ``fresh``, unless its ``start_id`` already started empty (a
  restart of that start resumes its state; :mod:`tidemark.runtime.supervisor.fresh_start`). A start with
  empty state is refused (:class:`StartRefused`) when the job's output already holds committed
  results, unless ``force``;
* :meth:`AttemptPlanner.failover`: the newest retained checkpoint or savepoint *of this run*,
  else where the run started (a corrupted one stops the job or falls back;
  :mod:`tidemark.runtime.supervisor.restore_source`);
* a first attempt restores no checkpoint or savepoint holding state that no stage of the job
  claims (a stage renamed or removed) unless the start allows non-restored state
  (:mod:`tidemark.runtime.supervisor.state_claims`);
* :meth:`AttemptPlanner.operator_restore`: what a ``RestoreCommand`` issued through the restore
  API names (its epoch, source and parallelism); later failovers fall back to it.

A restore goes through the coordinator's restore API, which issues the ``RestoreCommand`` and
the epoch; an empty start takes the coordinator's newest epoch + 1, and never an epoch that
failed (:meth:`AttemptPlanner.empty`). Epochs only grow: a failover first waits until the
coordinator has seen the failed epoch end (:meth:`AttemptPlanner.failover`).

The processes of the attempt before may still be alive while the next one is chosen (released
in place, on worker hosts that have not heard yet, or running beside a restarted supervisor), and
their sinks commit each checkpoint the coordinator announces. So a failover or resume never
restores an older checkpoint than one announced: its restore carries the newest retained id it
saw (``newest_seen``), the coordinator refuses it when a newer checkpoint completed meanwhile and
announces nothing newer of the older attempt afterwards, and the choice is made again
(:meth:`AttemptPlanner._choose_current`). A failover first waits until the coordinator has the
failed attempt ended (:meth:`AttemptPlanner._await_ended`), after which none of its checkpoints
completes, so it chooses once (an empty restart included); a resume beside a still-running
attempt relies on the guard alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidemark.checkpoint_store.catalog import (
    RestoreSourceNotFound,
    UnusableRestoreSource,
    find_by_id,
    resolve_restore_source,
)
from tidemark.checkpoint_store.verification import CorruptCheckpoint, verify_checkpoint
from tidemark.clock import now_ms
from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.topics import TopicNames
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.protocol.messages import RestoreCommand, StateHandle
from tidemark.api import JobSpec
from tidemark.runtime.supervisor.committed_output import committed_output, newest_committed_checkpoint
from tidemark.runtime.supervisor.fresh_start import (
    FreshStart,
    UnreadableFreshStart,
    is_restart,
    read_fresh_start,
    record_fresh_start,
)
from tidemark.runtime.supervisor.restore_source import (
    RestoreRefused,
    RestoreSource,
    choose_restore_source,
    refuse_below_committed_output,
    restore_candidates,
)
from tidemark.runtime.supervisor.state_claims import key_group_mismatch, refusal, unclaimed_state
from tidemark.chassis.logs import get_logger
from tidemark.start_request import StartRequest
from tidemark.state.operator import snapshot_state_names
from tidemark.storage.base import CheckpointStorage
from tidemark.types import CheckpointId, Epoch, JobId

log = get_logger(__name__)
COORDINATOR_PATIENCE_S = 180.0  # how long a restore or an epoch lookup waits for the coordinator
CHOICES = 10  # how often a restore source is chosen again while newer checkpoints complete meanwhile


@dataclass(frozen=True)
class FaultPlan:
    """Kill stage ``stage`` of attempt ``attempt`` (0 = first) at ``point`` (see runtime.job.faults);
    ``stage`` names a stage (its first worker) or one worker process (``<stage>.w<n>``)."""

    attempt: int
    stage: str
    point: str

    @classmethod
    def parse(cls, text: str) -> FaultPlan:
        parts = text.split("@")
        if len(parts) != 3 or not parts[0].isdigit():
            raise ValueError(f"fault plan must be 'attempt@stage@point[:n]', got {text!r}")
        return cls(int(parts[0]), parts[1], parts[2])


class StartRefused(Exception):
    """The job cannot start as asked; the message is one line for the operator."""


class _NewerCheckpoint(Exception):
    """A checkpoint newer than the chosen restore source completed meanwhile: choose again."""


@dataclass
class RunOptions:
    """A run of a job: what runs, how its first attempt starts (``start``: a named checkpoint or
    savepoint unless the job has newer state, empty state, or the newest retained state; see
    :mod:`tidemark.start_request`), and how its attempts run."""

    job_ref: str
    job_args: dict[str, Any] = field(default_factory=dict)
    parallelism: int | None = None
    start: StartRequest = StartRequest()
    max_restarts: int = 10
    faults: tuple[FaultPlan, ...] = ()
    ready_timeout_s: float = 240.0
    standby: bool = True  # a warm standby per worker process takes over the next attempt (runtime.worker.standby)
    workers: int | None = None  # worker processes per stage (runtime.job.physical_plan); None: the job's
    worker_hosts: bool = False  # run them on worker hosts (runtime.placement.hosted_workers), not as children
    fused: bool = False  # an exchange reader's workers run in its stage's processes (runtime.supervisor.launch_plan)
    generation: int | None = None  # the deployment generation starting (runtime.supervisor.suspension)


@dataclass
class AttemptState:
    index: int
    epoch: Epoch
    restore_path: str | None
    restored_id: CheckpointId | None


class AttemptPlanner:
    def __init__(self, settings: TidemarkSettings, options: RunOptions, coordinator: CoordinatorClient,
                 spec: JobSpec, storage: CheckpointStorage) -> None:
        self.settings = settings
        self.options = options
        # waits while the coordinator is down or still replaying (a restart); never sends twice
        self.coordinator = CoordinatorClient(coordinator.url, coordinator.token, timeout_s=coordinator.timeout_s,
                                             wait_unavailable_s=COORDINATOR_PATIENCE_S)
        self.spec = spec
        self.storage = storage
        self.topics = TopicNames(settings.topic_prefix)
        self.parallelism = options.parallelism or spec.parallelism
        self.baseline = 0  # newest retained state when the run began: listed by first()
        self.origin: AttemptState | None = None  # whose restore source a failover falls back to
        self.failed_epoch = 0  # the newest epoch that failed: an empty restart takes a newer one

    def first(self) -> AttemptState:
        """The first attempt of the run; later failovers fall back to its restore source."""
        self.origin = self._choose_current(self._first)
        return self.origin

    def adopt(self, parallelism: int, origin: AttemptState | None, baseline: int) -> None:
        """Take over a killed predecessor's planner state with its running attempt
        (:mod:`tidemark.runtime.supervisor.adoption`): later failovers fall back as its would have."""
        self.parallelism, self.origin, self.baseline = parallelism, origin, baseline

    def _first(self, newest: int) -> AttemptState:
        """Flink's operator's start semantics: ``fresh`` starts empty; a named checkpoint or
        savepoint is restored unless the job already has newer retained state (then this is a
        restart of a run that began there, e.g. a pod restarted with the same arguments, and
        the newest state is resumed: restoring the older one would commit its results again);
        otherwise the newest retained checkpoint or savepoint (last state). ``newest``: the
        newest retained id, listed just now."""
        start, job = self.options.start, self.spec.job_id
        self.baseline = newest
        if start.fresh:
            return self._fresh_attempt(newest)
        if start.names_source:
            requested = requested_id(self.storage, self.spec.job_id, start)
            if self.baseline > requested and not start.force:
                log.warning("the job has newer state than the requested restore source; resuming it",
                            job=job, requested=requested, newest=self.baseline)
                return self._resume_last_state(newest)
            verify_requested(self.storage, self.spec.job_id, start)
            return self._restore(0, start.from_checkpoint, start.from_savepoint, None if start.force else newest)
        if self.baseline:
            log.info("resuming the job's last state", job=job, checkpoint=self.baseline)
            return self._resume_last_state(newest)
        self._refuse_over_committed_output("a start without a retained checkpoint or savepoint")
        return self.empty(0)

    def _choose_current(self, choose: Callable[[int], AttemptState]) -> AttemptState:
        """``choose(newest)`` with the newest retained id listed first; again when the coordinator
        answers that a newer checkpoint completed meanwhile (see the module docstring)."""
        for choice in range(1, CHOICES + 1):
            try:
                return choose(self.newest_retained_id())
            except _NewerCheckpoint as exc:
                log.info("a newer checkpoint completed while the restore source was chosen; choosing again",
                         job=self.spec.job_id, choice=choice, reason=str(exc))
        self._refuse_over_removed_checkpoint()
        raise StartRefused(f"checkpoints kept completing while job {self.spec.job_id}'s restore source was "
                           f"chosen ({CHOICES} times): is another supervisor running the job?")

    def _refuse_over_removed_checkpoint(self) -> None:
        """The coordinator keeps refusing because its newest completed checkpoint is gone from
        storage (removed by hand, not discarded): say so, and how to recover."""
        job = self.job_document()
        last = (job or {}).get("last_completed") or {}
        last_id = int(last.get("id") or 0)
        if last_id > self.newest_retained_id() and find_by_id(self.storage, self.spec.job_id, last_id) is None:
            raise StartRefused(
                f"checkpoint {last_id} of job {self.spec.job_id} completed but is no longer in checkpoint storage; "
                f"discard it with 'tidemark checkpoints discard {self.spec.job_id} {last_id}', then start again")

    def _fresh_attempt(self, newest: int) -> AttemptState:
        """``--fresh``: empty state, unless ``start_id`` already started empty (a restart of that
        deployment: resume the newest state retained since, never one from before it; with none
        yet, start empty again)."""
        start_id, job = self.options.start.start_id, self.spec.job_id
        if start_id is not None:
            try:
                recorded = read_fresh_start(self.storage, job)
            except UnreadableFreshStart as exc:
                raise StartRefused(str(exc)) from None
            if is_restart(recorded, start_id):
                assert recorded is not None
                source = self._choose_source(recorded.baseline, None)  # verified; fallback only within it
                if source.checkpoint_id is not None:
                    log.info("restart of a fresh start; resuming the job's last state", job=job, start_id=start_id,
                             checkpoint=source.checkpoint_id, fresh_start_baseline=recorded.baseline)
                    return self._restore(0, source.checkpoint_id, None, newest)
                log.info("restart of a fresh start with no checkpoint of it; starting empty again", job=job,
                         start_id=start_id)
                self._refuse_over_committed_output("--fresh")
                return self.empty(0)
        self._refuse_over_committed_output("--fresh")
        if start_id is not None:
            record_fresh_start(self.storage, job, FreshStart(start_id, self.baseline, now_ms()))
            log.info("fresh start recorded", job=job, start_id=start_id, baseline=self.baseline)
        return self.empty(0)

    def _refuse_over_committed_output(self, start: str) -> None:
        if self.options.start.force:
            return
        found = committed_output(base_config(self.settings), self.topics, self.spec)
        if found is not None:
            raise StartRefused(f"{start} would write results again: {found}; resume the job's state "
                               f"(no --fresh), or pass --force to start empty anyway")

    def empty(self, index: int) -> AttemptState:
        """An attempt with empty state, on an epoch newer than the coordinator's and than any that
        failed: an attempt that failed before it registered (a worker that died while starting) may
        not have reached the coordinator yet, and its processes, released in place, take an
        attempt of an epoch they already released for released at once (nothing runs until the
        ready timeout)."""
        return AttemptState(index, Epoch(max(self.coordinator_epoch(), self.failed_epoch) + 1), None, None)

    def failover(self, index: int, failed: Epoch) -> AttemptState:
        """Restore from the newest checkpoint of this run, else from where the run started; a
        corrupted one stops the job or falls back (see :mod:`tidemark.runtime.supervisor.restore_source`).
        ``failed``: the epoch of the attempt that failed, which the supervisor has reported ended."""
        self._await_ended(failed)
        self.failed_epoch = max(self.failed_epoch, failed)
        return self._choose_current(lambda newest: self._failover(index, newest))

    def _failover(self, index: int, newest: int) -> AttemptState:
        assert self.origin is not None
        source = self._choose_source(self.baseline, self.origin.restore_path)
        if source.checkpoint_id is not None or source.path is not None:
            return self._restore(index, source.checkpoint_id, source.path, newest)
        log.warning("no checkpoint of this run yet; restarting from the start", job=self.spec.job_id)
        return self.empty(index)

    def _await_ended(self, failed: Epoch) -> None:
        """Wait until the coordinator has attempt ``failed`` ended: it announces no checkpoint of it
        after that, so what storage holds from then on is every checkpoint whose output the
        attempt's processes may have committed; and the restore it issues next takes a newer epoch
        (an attempt that failed before it registered is known to it only by that report, which
        travels through Kafka). The supervisor's report of the ending may not have reached it (a
        broker outage): after ``COORDINATOR_PATIENCE_S`` the failover goes on (nothing completes
        without a broker, and a restore is still guarded)."""
        deadline = time.monotonic() + COORDINATOR_PATIENCE_S
        while True:
            job = self.job_document()
            epoch = int(job.get("epoch") or 0) if job is not None else 0
            if job is None or epoch > failed or (epoch == failed and job.get("state") != "RUNNING"):
                return
            if time.monotonic() > deadline:
                log.warning("the coordinator still shows the failed attempt running; restarting anyway",
                            job=self.spec.job_id, epoch=failed, waited_s=COORDINATOR_PATIENCE_S)
                return
            time.sleep(0.05)

    def _resume_last_state(self, newest: int) -> AttemptState:
        """The newest retained checkpoint or savepoint, verified first: a corrupted one refuses the
        start, or with ``TIDEMARK_RESTORE_FALLBACK`` an older one stands in when that keeps the output
        exactly once (the same rule as a failover; :mod:`tidemark.runtime.supervisor.restore_source`)."""
        source = self._choose_source(0, None)
        if source.checkpoint_id is None:  # every candidate corrupted, and starting over is allowed
            log.warning("no whole checkpoint to resume; starting from the start", job=self.spec.job_id)
            return self.empty(0)
        self._refuse_below_discarded(source.checkpoint_id)
        return self._restore(0, source.checkpoint_id, None, newest)

    def _refuse_below_discarded(self, target: int) -> None:
        """An operator discarded a checkpoint newer than ``target`` (a corrupted one, ``tidemark
        checkpoints discard``): its output may be committed, and restoring ``target`` would commit
        it again. So ``target`` is restored only when the commit markers show no output after it
        (:func:`~tidemark.runtime.supervisor.restore_source.refuse_below_committed_output`), or with ``force``."""
        job, spec = self.job_document(), self.spec
        discarded = int((job or {}).get("newest_discarded_checkpoint") or 0)
        if discarded <= target or self.options.start.force:
            return
        try:
            refuse_below_committed_output(
                spec, f"checkpoint {discarded} of job {spec.job_id} was discarded", target,
                lambda: newest_committed_checkpoint(base_config(self.settings), self.topics, spec),
                remedy=f"; pass --force to restore checkpoint {target} anyway (that output is written twice), "
                       "or --fresh --force to start over")
        except RestoreRefused as exc:
            log.error("restore refused", job=spec.job_id, error=str(exc))
            raise StartRefused(str(exc)) from None
        log.warning("restoring a checkpoint older than one discarded: no output after it is committed",
                    job=spec.job_id, checkpoint=target, discarded=discarded)

    def _choose_source(self, baseline: int, started_from: str | None) -> RestoreSource:
        try:
            return choose_restore_source(
                self.storage, self.spec, baseline=baseline, started_from=started_from,
                allow_fallback=self.settings.restore_fallback,
                committed_up_to=lambda: newest_committed_checkpoint(base_config(self.settings), self.topics, self.spec))
        except RestoreRefused as exc:
            log.error("restore refused", job=self.spec.job_id, error=str(exc))
            raise StartRefused(str(exc)) from None

    def operator_restore(self, index: int, command: RestoreCommand) -> AttemptState:
        """The attempt a restore issued through the API names: its epoch, source and parallelism.
        Later failovers fall back to it, not to where the run started."""
        self.parallelism = command.parallelism
        self.baseline = max(self.newest_retained_id(), command.checkpoint_id)
        self.origin = AttemptState(index, command.epoch, command.metadata_path, command.checkpoint_id)
        return self.origin

    def _restore(self, index: int, checkpoint_id: int | None, path: str | None,
                 newest_seen: int | None) -> AttemptState:
        """Issue the restore; ``newest_seen`` (None: unguarded) as the restore API takes it."""
        if index == 0:
            check_claims(self.storage, self.spec, self.options.start.allow_non_restored_state, checkpoint_id, path)
        try:
            doc = self.coordinator.restore(self.spec.job_id, parallelism=self.parallelism,
                                           checkpoint_id=checkpoint_id, savepoint_path=path, newest_seen=newest_seen)
        except ApiError as exc:
            if exc.status == 409 and newest_seen is not None:
                raise _NewerCheckpoint(str(exc)) from None
            raise
        log.info("restore issued", job=self.spec.job_id, checkpoint=doc["checkpoint_id"], epoch=doc["epoch"],
                 path=doc["metadata_path"])
        return AttemptState(index, Epoch(doc["epoch"]), doc["metadata_path"], CheckpointId(doc["checkpoint_id"]))

    def newest_retained_id(self) -> int:
        """Counting checkpoints whose ``_metadata`` does not decode: never skip one silently."""
        return max((checkpoint_id for checkpoint_id, _ in restore_candidates(self.storage, self.spec, 0)), default=0)

    def coordinator_epoch(self) -> int:
        job = self.job_document()
        return int(job.get("epoch") or 0) if job is not None else 0

    def job_document(self) -> dict[str, Any] | None:
        """The coordinator's document of the job (``GET /api/v1/jobs``), None before it knows it."""
        return next((j for j in self.coordinator.jobs()["jobs"] if j.get("job") == self.spec.job_id), None)


# ---------------------------------------------------------------------- checks of a start's restore source


def requested_id(storage: CheckpointStorage, job: JobId, start: StartRequest) -> int:
    """The id of the checkpoint or savepoint ``start`` names."""
    if start.from_checkpoint is not None:
        return start.from_checkpoint
    try:
        source = resolve_restore_source(storage, job, None, start.from_savepoint)
    except (RestoreSourceNotFound, UnusableRestoreSource) as exc:
        raise StartRefused(str(exc)) from None
    return source.metadata.checkpoint_id


def verify_requested(storage: CheckpointStorage, job: JobId, start: StartRequest) -> None:
    """The checkpoint or savepoint ``start`` names must be whole (no fallback: it was named)."""
    try:
        checkpoint = CheckpointId(start.from_checkpoint) if start.from_checkpoint is not None else None
        source = resolve_restore_source(storage, job, checkpoint, start.from_savepoint)
        verify_checkpoint(storage, source.path)
    except (RestoreSourceNotFound, UnusableRestoreSource, CorruptCheckpoint) as exc:
        raise StartRefused(str(exc)) from None


def check_claims(storage: CheckpointStorage, spec: JobSpec, allow_non_restored_state: bool,
                 checkpoint_id: int | None, path: str | None) -> None:
    """Refuse restoring state no stage of the job claims, unless the start allows it, and keyed
    state written under another max parallelism; then say what is dropped
    (:mod:`tidemark.runtime.supervisor.state_claims`)."""
    job = spec.job_id
    try:
        stored = resolve_restore_source(storage, job, CheckpointId(checkpoint_id) if checkpoint_id else None, path)
    except (RestoreSourceNotFound, UnusableRestoreSource) as exc:
        raise StartRefused(str(exc)) from None
    mismatch = key_group_mismatch(stored.metadata, spec)
    if mismatch is not None:
        raise StartRefused(mismatch)

    def operator_state_names(handle: StateHandle) -> list[str]:
        """The operator states of ``handle`` by name, for the refusal (none when unreadable: the
        restore itself then says why)."""
        try:
            return [name for ref in handle.files for name in snapshot_state_names(storage.read_verified(ref), ref.path)]
        except Exception:  # noqa: BLE001 - naming the states is best effort
            return []

    unclaimed = unclaimed_state(stored.metadata, spec, operator_state_names)
    if not unclaimed:
        return
    if not allow_non_restored_state:
        raise StartRefused(refusal(stored.metadata, unclaimed))
    log.warning("restoring without the state no stage claims: it is dropped", job=job,
                checkpoint=stored.metadata.checkpoint_id, dropped="; ".join(u.describe() for u in unclaimed))
