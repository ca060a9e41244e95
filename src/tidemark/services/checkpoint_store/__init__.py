"""Checkpoint-store service: makes completed checkpoints durable, applies retention, deletes
what nothing retained needs. Logic in :mod:`tidemark.checkpoint_store`; this is its edge."""

from __future__ import annotations

from pydantic import Field

from tidemark.config.settings import TidemarkSettings
from tidemark.chassis.app import ServiceApp
from tidemark.services.checkpoint_store.edge import CheckpointStoreEdge


class CheckpointStoreSettings(TidemarkSettings):
    http_port: int = Field(9401, ge=0, le=65535)
    retained_checkpoints: int = Field(3, ge=1, le=1000)


SETTINGS = CheckpointStoreSettings


def build(settings: CheckpointStoreSettings) -> ServiceApp:
    app = ServiceApp("checkpoint-store", settings)
    edge = CheckpointStoreEdge(app, settings.resolved_storage_url, settings.retained_checkpoints)
    app.follow_log([app.topics.checkpoint_events, app.topics.control], edge.on_record, edge.on_caught_up)
    return app
