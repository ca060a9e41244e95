"""Coordinator service: triggers checkpoints and collects acks (wiring; logic in tidemark.checkpoint)."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.settings import TidemarkSettings
from tidemark.protocol.messages import CheckpointTrigger, JobRegistration, TaskAck, TaskDecline
from tidemark.service.app import ServiceApp
from tidemark.service.dead_letters import RawRecord
from tidemark.service.logs import get_logger
from tidemark.types import CheckpointId, CheckpointType

log = get_logger(__name__)


class CheckpointSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_ms: int = Field(5000, ge=100)
    timeout_ms: int = Field(60000, ge=100)
    min_pause_ms: int = Field(0, ge=0)
    max_concurrent: int = Field(1, ge=1, le=16)
    tolerable_failures: int = Field(0, ge=0)
    mode: str = Field("EXACTLY_ONCE", pattern="^(EXACTLY_ONCE|AT_LEAST_ONCE)$")


class CoordinatorSettings(TidemarkSettings):
    http_port: int = Field(9400, ge=0, le=65535)
    checkpoint: CheckpointSettings = CheckpointSettings()


SETTINGS = CoordinatorSettings


def build(settings: CoordinatorSettings) -> ServiceApp:
    app = ServiceApp("coordinator", settings)
    jobs: dict[str, JobRegistration] = {}
    next_id: dict[str, int] = {}

    async def on_registration(message: JobRegistration, raw: RawRecord) -> None:
        jobs[message.job_id] = message
        log.info("job registered", job=message.job_id, epoch=message.epoch, tasks=len(message.tasks))

    async def on_ack(message: TaskAck | TaskDecline, raw: RawRecord) -> None:
        log.info("ack received", job=message.job_id, checkpoint=message.checkpoint_id,
                 kind=type(message).__name__)

    app.subscribe(app.topics.control, on_registration, JobRegistration)
    app.subscribe(app.topics.acks, on_ack, TaskAck, TaskDecline)

    @app.every(settings.checkpoint.interval_ms / 1000)
    async def trigger() -> None:
        for job_id, registration in jobs.items():
            checkpoint_id = next_id.get(job_id, 1)
            next_id[job_id] = checkpoint_id + 1
            await app.publish(app.topics.control, CheckpointTrigger(
                job_id=registration.job_id, checkpoint_id=CheckpointId(checkpoint_id),
                checkpoint_type=CheckpointType.CHECKPOINT, mode=registration.mode,
                triggered_at=int(time.time() * 1000), epoch=registration.epoch,
            ), key=job_id.encode())

    return app
