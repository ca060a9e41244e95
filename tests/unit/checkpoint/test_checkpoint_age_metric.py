"""The coordinator's checkpoint age (``tidemark_checkpoint_seconds_since_last_completed``) is
exported only while the job is meant to run (CREATED, RUNNING, RESTARTING): a job stopped with a
savepoint, cancelled or failed has no series, so neither ``TidemarkNoRecentCheckpoint`` nor a
dashboard panel sees an age that only grows; a job started again counts from its new start."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from checkpoint_support import ack, registration, savepoint_request
from prometheus_client import REGISTRY, generate_latest

from tidemark.chassis.dead_letter_publisher import RawRecord
from tidemark.checkpoint import AttemptOutcome, CheckpointingOptions, JobState
from tidemark.checkpoint.job_state import meant_to_run
from tidemark.kafka.topics import TopicNames
from tidemark.protocol.messages import CheckpointMetadata, CheckpointTrigger, JobRegistration
from tidemark.services.coordinator import edge as edge_module
from tidemark.services.coordinator import metrics as metrics_module
from tidemark.services.coordinator.edge import CoordinatorEdge
from tidemark.services.coordinator.metrics import CoordinatorMetrics
from tidemark.types import JobId

AGE = "tidemark_checkpoint_seconds_since_last_completed"
OPTS = CheckpointingOptions(interval_ms=1_000, timeout_ms=60_000, tolerable_failures=0)
TOPICS = TopicNames()
_offsets = itertools.count()


class Clock:
    """The coordinator's clock (``now_ms``) and the metric's (``time.time``), moved by hand."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ms = 1_700_000_000_000
        monkeypatch.setattr(edge_module, "now_ms", lambda: self.ms)
        monkeypatch.setattr(metrics_module, "time", SimpleNamespace(time=lambda: self.ms / 1000))

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


class Coordinator:
    """A live :class:`CoordinatorEdge` without Kafka, rebuilt from ``replayed`` (the records it
    reads back from its topics when it starts): what it publishes is kept, and a checkpoint
    completes as the workers' acks and the checkpoint-store's confirmation come in."""

    def __init__(self, clock: Clock, replayed: tuple[Any, ...] = ()) -> None:
        self.clock = clock
        self.published: list[Any] = []
        app = SimpleNamespace(topics=TOPICS, publish=self._publish)
        self.edge = CoordinatorEdge(app, OPTS)  # type: ignore[arg-type]
        for message in replayed:
            asyncio.run(self.edge.on_record(message, self._raw(TOPICS.control), True))
        asyncio.run(self.edge.on_caught_up())

    async def _publish(self, topic: str, message: Any, key: bytes | None = None) -> None:
        self.published.append(message)

    def _raw(self, topic: str) -> RawRecord:
        return RawRecord(topic, 0, next(_offsets), self.clock.ms, None, None, {})

    def record(self, message: Any, topic: str = TOPICS.control) -> None:
        asyncio.run(self.edge.on_record(message, self._raw(topic), False))

    def tick(self) -> None:
        asyncio.run(self.edge.tick())

    def complete_checkpoint(self, reg: JobRegistration) -> None:
        """The next trigger (after the interval), every task's ack, the store's confirmation."""
        self.clock.advance(OPTS.interval_ms / 1000)
        self.tick()
        (trigger,) = [m for m in self.published if isinstance(m, CheckpointTrigger)]
        self.published.clear()
        for task in reg.tasks:
            self.record(ack(trigger.checkpoint_id, task, self.clock.ms, reg.epoch, job=reg.job_id), TOPICS.acks)
        (metadata,) = [m for m in self.published if isinstance(m, CheckpointMetadata)]
        self.published.clear()
        self.record(metadata, TOPICS.checkpoint_events)  # durable: the checkpoint completed


def age(job: str) -> float | None:
    return REGISTRY.get_sample_value(AGE, {"job": job})


def exported(job: str) -> bool:
    return f'{AGE}{{job="{job}"}}' in generate_latest().decode()


def test_the_age_of_a_job_stopped_with_a_savepoint_is_removed_and_counts_again_from_its_restart(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    coordinator = Coordinator(clock)
    job = JobId("age-stopped")
    reg = registration(job=job)
    coordinator.record(reg)
    assert coordinator.edge.coordinators[job].status.state is JobState.RUNNING
    assert age(job) == 0.0  # no checkpoint completed yet
    coordinator.complete_checkpoint(reg)
    clock.advance(60)
    assert age(job) == 60.0

    coordinator.record(replace(savepoint_request("stop", clock.ms, stop=True), job_id=job))
    coordinator.complete_checkpoint(reg)  # the savepoint: the job is SUSPENDED
    assert coordinator.edge.coordinators[job].status.state is JobState.SUSPENDED
    assert age(job) is None and not exported(job)
    coordinator.record(replace(reg, finished=True, outcome=AttemptOutcome.FINISHED.value, registered_at=clock.ms))
    clock.advance(3600)  # stopped for an hour
    coordinator.tick()
    assert age(job) is None and not exported(job)

    restarted = registration(epoch=1, job=job, at=clock.ms)
    coordinator.record(restarted)  # resumed from the savepoint
    assert coordinator.edge.coordinators[job].status.state is JobState.RUNNING
    assert age(job) == 0.0  # not the hour it was stopped for
    clock.advance(30)
    assert age(job) == 30.0
    coordinator.complete_checkpoint(restarted)
    clock.advance(5)
    assert age(job) == 5.0


@pytest.mark.parametrize("outcome", [AttemptOutcome.CANCELLED, AttemptOutcome.FAILED])
def test_the_age_of_a_cancelled_or_failed_job_is_removed(monkeypatch: pytest.MonkeyPatch,
                                                         outcome: AttemptOutcome) -> None:
    clock = Clock(monkeypatch)
    coordinator = Coordinator(clock)
    job = JobId(f"age-{outcome.value.lower()}")
    reg = registration(job=job)
    coordinator.record(reg)
    coordinator.complete_checkpoint(reg)
    clock.advance(10)
    assert age(job) == 10.0
    coordinator.record(replace(reg, finished=True, outcome=outcome.value, reason="ended", registered_at=clock.ms))
    assert coordinator.edge.coordinators[job].status.state.value == outcome.value
    clock.advance(3600)
    coordinator.tick()
    assert age(job) is None and not exported(job)


def test_a_restarted_coordinator_exports_no_age_for_a_job_that_had_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(monkeypatch)
    job = JobId("age-replayed")
    reg = registration(job=job)
    ended = replace(reg, finished=True, outcome=AttemptOutcome.CANCELLED.value, registered_at=1)
    coordinator = Coordinator(clock, replayed=(reg, ended))
    assert coordinator.edge.coordinators[job].status.state is JobState.CANCELLED
    assert age(job) is None and not exported(job)


@pytest.mark.parametrize("state", list(JobState), ids=lambda s: s.value)
def test_the_age_is_exported_exactly_in_the_states_a_job_is_meant_to_run_in(state: JobState) -> None:
    """Every state, including any added later: only CREATED, RUNNING and RESTARTING export it."""
    job = f"age-state-{state.value.lower()}"
    metrics = CoordinatorMetrics(job, 60_000)
    metrics.update_state(state, attempt_failed=False)
    expected = state in {JobState.CREATED, JobState.RUNNING, JobState.RESTARTING}
    assert meant_to_run(state) is expected
    assert exported(job) is expected
    metrics.update_state(JobState.RUNNING, attempt_failed=False)  # back to running: exported again
    assert exported(job)
