"""Changelog service: owns state changelog topics and their truncation (wiring)."""

from __future__ import annotations

from pydantic import Field

from tidemark.config.settings import TidemarkSettings
from tidemark.protocol.messages import CheckpointCompleted, MaterializationEvent
from tidemark.service.app import ServiceApp
from tidemark.service.dead_letters import RawRecord
from tidemark.service.logs import get_logger

log = get_logger(__name__)


class ChangelogSettings(TidemarkSettings):
    http_port: int = Field(9402, ge=0, le=65535)


SETTINGS = ChangelogSettings


def build(settings: ChangelogSettings) -> ServiceApp:
    app = ServiceApp("changelog", settings)

    async def on_materialization(message: MaterializationEvent, raw: RawRecord) -> None:
        log.info("materialization event", job=message.job_id, task=message.task_id,
                 status=message.status.value)

    async def on_completed(message: CheckpointCompleted, raw: RawRecord) -> None:
        log.info("checkpoint completed", job=message.job_id, checkpoint=message.checkpoint_id)

    app.subscribe(app.topics.materializations, on_materialization, MaterializationEvent)
    app.subscribe(app.topics.control, on_completed, CheckpointCompleted)
    return app
