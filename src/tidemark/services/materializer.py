"""Materializer service: folds changelogs into materialized snapshots (wiring)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.settings import TidemarkSettings
from tidemark.protocol.messages import CheckpointCompleted
from tidemark.service.app import ServiceApp
from tidemark.service.dead_letters import RawRecord
from tidemark.service.logs import get_logger

log = get_logger(__name__)


class MaterializationSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_ms: int = Field(60000, ge=100)


class MaterializerSettings(TidemarkSettings):
    http_port: int = Field(9403, ge=0, le=65535)
    materialization: MaterializationSettings = MaterializationSettings()


SETTINGS = MaterializerSettings


def build(settings: MaterializerSettings) -> ServiceApp:
    app = ServiceApp("materializer", settings)

    async def on_completed(message: CheckpointCompleted, raw: RawRecord) -> None:
        log.info("checkpoint completed", job=message.job_id, checkpoint=message.checkpoint_id)

    app.subscribe(app.topics.control, on_completed, CheckpointCompleted)
    return app
