"""Coordinator settings (``TIDEMARK_CHECKPOINT__*``, ``TIDEMARK_SAVEPOINTS__*``, ``TIDEMARK_JOBS__*``),
validated at start."""

from __future__ import annotations

import importlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from tidemark.checkpoint.options import CheckpointingOptions
from tidemark.checkpoint.savepoint_schedule import SavepointPolicy
from tidemark.config.settings import TidemarkSettings
from tidemark.types import CheckpointingMode

MIN_API_TOKEN_LENGTH = 16
EXAMPLE_JOBS = ("tidemark.examples.access_log:url_counts", "tidemark.examples.access_log:top_urls",
                "tidemark.examples.access_log:ip_sessions")
JOB_REFERENCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class CheckpointSettings(BaseModel):
    """Flink's CheckpointConfig options, applied to every job this coordinator runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_ms: int = Field(5000, ge=10)
    timeout_ms: int = Field(600000, ge=100)  # Flink's default: a lagging job is not failed over for a slow checkpoint
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


class SavepointSettings(BaseModel):
    """Periodic savepoints and their retained history (``TIDEMARK_SAVEPOINTS__*``): a savepoint of
    every running job each ``interval_s`` seconds (0: none), and each job's savepoints beyond the
    newest ``retained`` disposed when one completes (0: every savepoint is kept)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_s: int = Field(0, ge=0, le=7 * 24 * 3600)
    retained: int = Field(0, ge=0, le=1000)

    def policy(self) -> SavepointPolicy:
        return SavepointPolicy(interval_ms=self.interval_s * 1000, retained=self.retained)


def _importable(reference: str) -> str | None:
    """Why ``reference`` cannot name a job (None when it can): module and attribute must exist."""
    module_name, _, attribute = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # an ImportError, or whatever the module raises while importing
        return f"cannot import {module_name!r}: {exc}"
    for part in attribute.split("."):
        if not hasattr(target, part):
            return f"{module_name!r} has no attribute {attribute!r}"
        target = getattr(target, part)
    return None


class JobsSettings(BaseModel):
    """Which jobs ``POST /api/v1/runs`` may start, and how (``TIDEMARK_JOBS__*``).

    ``launcher``: ``local`` starts each run as a ``tidemark jobs run`` child process of the
    coordinator; ``none`` disables the endpoints (501), e.g. in Kubernetes, where jobs run as the
    Helm chart's worker workload. ``catalog``: the job references (``package.module:attribute``)
    a run may name, as a JSON list or comma-separated; with the local launcher every one must
    import at start.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    launcher: Literal["local", "none"] = "local"
    catalog: Annotated[tuple[str, ...], NoDecode] = EXAMPLE_JOBS

    @field_validator("catalog", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not a JSON list of job references: {exc}") from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("catalog")
    @classmethod
    def _references(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        for reference in value:
            if not JOB_REFERENCE.fullmatch(reference):
                raise ValueError(f"{reference!r} is not a job reference 'package.module:attribute'")
        if info.data.get("launcher") == "local":
            if not value:
                raise ValueError("is empty; list the jobs runs may start, or set TIDEMARK_JOBS__LAUNCHER=none")
            for reference in value:
                problem = _importable(reference)
                if problem is not None:
                    raise ValueError(f"{reference}: {problem}")
        return tuple(dict.fromkeys(value))


class CoordinatorSettings(TidemarkSettings):
    http_port: int = Field(9400, ge=0, le=65535)
    tick_interval_ms: int = Field(100, ge=10, le=10000)
    supervisor_silence_ms: int = Field(5000, ge=2000, le=600000)  # a job's supervisor unheard this long: not running
    checkpoint: CheckpointSettings = CheckpointSettings()
    savepoints: SavepointSettings = SavepointSettings()
    jobs: JobsSettings = JobsSettings()

    @field_validator("api_token")
    @classmethod
    def _token_strength(cls, value: str | None) -> str | None:
        """``TIDEMARK_API_TOKEN``, when set, must be a real secret (at least 16 characters)."""
        if value is not None and len(value.strip()) < MIN_API_TOKEN_LENGTH:
            raise ValueError(f"must be at least {MIN_API_TOKEN_LENGTH} characters (e.g. openssl rand -hex 32)")
        return value

    @model_validator(mode="after")
    def _launcher_needs_a_port(self) -> CoordinatorSettings:
        """Runs reach this coordinator at its HTTP port, so the local launcher needs a fixed one."""
        if self.jobs.launcher == "local" and self.http_port == 0:
            raise ValueError("TIDEMARK_HTTP_PORT=0 (a random port) cannot be used with "
                             "TIDEMARK_JOBS__LAUNCHER=local: the job runs must reach the coordinator; "
                             "set a port or TIDEMARK_JOBS__LAUNCHER=none")
        return self
