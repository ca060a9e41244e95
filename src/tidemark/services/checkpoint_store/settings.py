"""The checkpoint-store service's settings."""

from __future__ import annotations

from pydantic import Field

from tidemark.config.settings import TidemarkSettings


class CheckpointStoreSettings(TidemarkSettings):
    http_port: int = Field(9401, ge=0, le=65535)
    retained_checkpoints: int = Field(3, ge=1, le=1000)
