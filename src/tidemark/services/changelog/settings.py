"""Changelog service settings (``TIDEMARK_CHANGELOG__*``), validated at start."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tidemark.config.settings import TidemarkSettings


class ChangelogOptions(BaseModel):
    """How the service creates and truncates changelog topics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default_partitions: int = Field(8, ge=1, le=32768)  # when a registration asks for 0
    truncation_interval_ms: int = Field(2000, ge=100, le=3_600_000)
    delete_records: bool = True  # physical truncation with DeleteRecords
    delete_records_retry_ms: int = Field(600_000, ge=1000)  # after "unsupported": logical only
    delete_records_timeout_s: float = Field(10.0, gt=0, le=300)
    measure_bytes: bool = True  # read the changelogs to report pending and truncated bytes


class ChangelogServiceSettings(TidemarkSettings):
    http_port: int = Field(9402, ge=0, le=65535)
    changelog: ChangelogOptions = ChangelogOptions()
