"""Materializer settings (``TIDEMARK_MATERIALIZATION__*``; checkpoint storage from
``TIDEMARK_CHECKPOINT_STORAGE_URL``), validated at start."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tidemark.config.settings import TidemarkSettings
from tidemark.materializer.options import MaterializationOptions
from tidemark.state.rocksdb.options import RocksDBOptions


class MaterializationSettings(BaseModel):
    """When tasks are materialized, and what each task's replica may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_ms: int = Field(60000, ge=100)
    jitter_ms: int = Field(10000, ge=0)
    failure_budget: int = Field(3, ge=1, le=1000)
    max_backoff_ms: int = Field(600000, ge=100)
    tick_ms: int = Field(500, ge=50, le=60000)
    replica_memory_bytes: int = Field(16 << 20, ge=4 << 20)
    read_idle_timeout_s: float = Field(30.0, gt=0, le=3600)

    @field_validator("jitter_ms")
    @classmethod
    def _jitter_within_interval(cls, value: int, info: Any) -> int:
        interval = info.data.get("interval_ms")
        if interval is not None and value > interval:
            raise ValueError(f"must not exceed interval_ms ({interval})")
        return value

    @field_validator("max_backoff_ms")
    @classmethod
    def _backoff_at_least_interval(cls, value: int, info: Any) -> int:
        interval = info.data.get("interval_ms")
        if interval is not None and value < interval:
            raise ValueError(f"must be at least interval_ms ({interval})")
        return value

    def options(self) -> MaterializationOptions:
        return MaterializationOptions(self.interval_ms, self.jitter_ms, self.failure_budget,
                                      self.max_backoff_ms)

    def replica_options(self) -> RocksDBOptions:
        """Half the budget for the block cache, half for memtables (charged to the cache)."""
        half = self.replica_memory_bytes // 2
        return RocksDBOptions(block_cache_bytes=half, write_buffer_total_bytes=half,
                              write_buffer_bytes=max(1 << 20, half // 4))


class MaterializerSettings(TidemarkSettings):
    http_port: int = Field(9403, ge=0, le=65535)
    materialization: MaterializationSettings = MaterializationSettings()
