"""Coordinator settings (``TIDEMARK_CHECKPOINT__*``), validated at start."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidemark.checkpoint.options import CheckpointingOptions
from tidemark.config.settings import TidemarkSettings
from tidemark.types import CheckpointingMode

MIN_API_TOKEN_LENGTH = 16


class CheckpointSettings(BaseModel):
    """Flink's CheckpointConfig options, applied to every job this coordinator runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_ms: int = Field(5000, ge=10)
    timeout_ms: int = Field(60000, ge=100)
    min_pause_ms: int = Field(0, ge=0)
    max_concurrent: int = Field(1, ge=1, le=16)
    tolerable_failures: int = Field(0, ge=0)
    mode: CheckpointingMode = CheckpointingMode.EXACTLY_ONCE

    def options(self) -> CheckpointingOptions:
        return CheckpointingOptions(
            interval_ms=self.interval_ms, timeout_ms=self.timeout_ms,
            min_pause_ms=self.min_pause_ms, max_concurrent=self.max_concurrent,
            tolerable_failures=self.tolerable_failures, mode=self.mode,
        )


class CoordinatorSettings(TidemarkSettings):
    http_port: int = Field(9400, ge=0, le=65535)
    tick_interval_ms: int = Field(100, ge=10, le=10000)
    checkpoint: CheckpointSettings = CheckpointSettings()

    @field_validator("api_token")
    @classmethod
    def _token_strength(cls, value: str | None) -> str | None:
        """``TIDEMARK_API_TOKEN``, when set, must be a real secret (at least 16 characters)."""
        if value is not None and len(value.strip()) < MIN_API_TOKEN_LENGTH:
            raise ValueError(f"must be at least {MIN_API_TOKEN_LENGTH} characters (e.g. openssl rand -hex 32)")
        return value
