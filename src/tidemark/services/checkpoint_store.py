"""Checkpoint-store service: persists completed checkpoints (wiring; logic in tidemark.checkpoint_store)."""

from __future__ import annotations

from pydantic import Field

from tidemark.config.settings import TidemarkSettings
from tidemark.protocol.messages import CheckpointDiscarded, CheckpointMetadata
from tidemark.service.app import ServiceApp
from tidemark.service.dead_letters import RawRecord
from tidemark.service.logs import get_logger

log = get_logger(__name__)


class CheckpointStoreSettings(TidemarkSettings):
    http_port: int = Field(9401, ge=0, le=65535)
    retained_checkpoints: int = Field(3, ge=1, le=1000)


SETTINGS = CheckpointStoreSettings


def build(settings: CheckpointStoreSettings) -> ServiceApp:
    app = ServiceApp("checkpoint-store", settings)

    async def on_event(message: CheckpointMetadata | CheckpointDiscarded, raw: RawRecord) -> None:
        log.info("checkpoint event", job=message.job_id, checkpoint=message.checkpoint_id,
                 kind=type(message).__name__)

    app.subscribe(app.topics.checkpoint_events, on_event, CheckpointMetadata, CheckpointDiscarded)
    return app
