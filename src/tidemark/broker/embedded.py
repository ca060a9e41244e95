"""Run the embedded broker (Apache Kafka by default, Tansu on request) as a managed subprocess.

Lifecycle: ``EmbeddedBroker(state_dir)`` -> ``start()`` (prepares the engine: fetches and formats
on the first start; spawns the broker, waits until it serves metadata, records pid, port and
engine in ``state_dir/broker.json``) -> ``stop()`` (SIGTERM, then SIGKILL after a grace period,
removes the record). ``status()`` may be called at any time, also from another process that only
shares ``state_dir``. With the Apache Kafka engine the data and the port survive a restart on the
same ``state_dir``; with Tansu nothing does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tidemark.broker.apache_kafka import ApacheKafkaEngine
from tidemark.broker.engine import (
    ENGINE_NAMES,
    BrokerEngine,
    EmbeddedBrokerError,
    EngineName,
    engine_name_from_env,
)
from tidemark.broker.tansu import TansuEngine
from tidemark.processes import die_with_parent, free_port, pid_alive, port_free, stop_pid

BROKER_RECORD = "broker.json"
BROKER_LOG = "broker.log"

__all__ = ["BrokerStatus", "EmbeddedBroker", "EmbeddedBrokerError", "kafka_or_embedded", "wait_for_kafka"]


def engine(name: str | None = None) -> BrokerEngine:
    """The engine called ``name`` (default: from the environment)."""
    chosen = name or engine_name_from_env()
    if chosen == "kafka":
        return ApacheKafkaEngine()
    if chosen == "tansu":
        return TansuEngine()
    raise EmbeddedBrokerError(f"unknown broker engine {chosen!r}; use one of {', '.join(ENGINE_NAMES)}")


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    pid: int | None
    port: int | None
    log_path: Path
    engine: str | None = None
    startup_s: float | None = None  # spawn to serving metadata, at the last start
    fetch_s: float | None = None  # fetching the engine's files at the last start (0: cached)

    @property
    def bootstrap_servers(self) -> str | None:
        return f"127.0.0.1:{self.port}" if self.port else None

    def describe(self) -> str:
        timing = ""
        if self.startup_s is not None:
            timing = f", started in {self.startup_s:.1f}s"
            if self.fetch_s:
                timing += f" after fetching for {self.fetch_s:.1f}s"
        return f"{self.engine or 'broker'} at {self.bootstrap_servers} (pid {self.pid}{timing})"


def _say(message: str) -> None:
    print(f"broker: {message}", file=sys.stderr, flush=True)


def wait_for_kafka(bootstrap: str, timeout_s: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Block until a Kafka Metadata request to ``bootstrap`` lists at least one broker."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if not alive():
            raise EmbeddedBrokerError(f"the broker process for {bootstrap} exited during start-up")
        try:
            if admin.list_topics(timeout=1.0).brokers:
                return
        except Exception as exc:  # KafkaException while the listener comes up
            last_error = exc
        time.sleep(0.1)
    raise EmbeddedBrokerError(f"broker at {bootstrap} not ready after {timeout_s:.0f}s: {last_error}")


PORT_RELEASE_S = 5.0  # a broker killed a moment ago may hold its listening port a moment longer


def _port_released(port: int, patience_s: float) -> bool:
    """True once ``port`` can be bound, waiting up to ``patience_s``."""
    deadline = time.monotonic() + patience_s
    while not port_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


class EmbeddedBroker:
    """One broker process whose pid/port record lives in ``state_dir``."""

    def __init__(self, state_dir: Path | str, *, port: int | None = None, engine_name: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.requested_port = port
        self.engine_name = engine_name
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def record_path(self) -> Path:
        return self.state_dir / BROKER_RECORD

    @property
    def log_path(self) -> Path:
        return self.state_dir / BROKER_LOG

    def status(self) -> BrokerStatus:
        try:
            record = json.loads(self.record_path.read_text())
            pid, port = int(record["pid"]), int(record["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return BrokerStatus(False, None, None, self.log_path)
        return BrokerStatus(pid_alive(pid), pid, port, self.log_path, record.get("engine"),
                            record.get("startup_s"), record.get("fetch_s"))

    def start(self, *, tie_to_parent: bool = False, ready_timeout_s: float | None = None,
              progress: Callable[[str], None] = _say) -> BrokerStatus:
        """Start the broker (idempotent when one is already running from this state dir).

        ``tie_to_parent`` makes the kernel kill the broker when the calling process dies, so a
        test session killed with SIGKILL leaves no broker behind.
        """
        current = self.status()
        if current.running:
            return current
        chosen = engine(self.engine_name)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        port = self.requested_port or chosen.saved_port(self.state_dir) or free_port()
        if not _port_released(port, PORT_RELEASE_S):
            raise EmbeddedBrokerError(f"port {port} on 127.0.0.1 is in use; stop what holds it or start with --port")
        plan = chosen.prepare(self.state_dir, port, progress)
        spawned = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                plan.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **plan.env},
                start_new_session=not tie_to_parent,
                preexec_fn=die_with_parent if tie_to_parent else None,
            )
        record = {"pid": self._process.pid, "port": port, "engine": chosen.name}
        self.record_path.write_text(json.dumps(record))
        process = self._process
        try:
            wait_for_kafka(f"127.0.0.1:{port}", ready_timeout_s or plan.ready_timeout_s,
                           alive=lambda: process.poll() is None)
        except EmbeddedBrokerError as exc:
            self.stop()
            raise EmbeddedBrokerError(f"{exc}; see {self.log_path}") from None
        record.update(startup_s=round(time.monotonic() - spawned, 3), fetch_s=round(plan.fetch_s, 3))
        self.record_path.write_text(json.dumps(record))
        return self.status()

    def stop(self, *, grace_s: float = 30.0) -> bool:
        """Stop the recorded broker; True when one was running. Safe to call repeatedly."""
        status = self.status()
        own = self._process if self._process is not None and self._process.pid == status.pid else None
        stopped = status.pid is not None and stop_pid(status.pid, grace_s, reap=own)
        self._process = None
        self.record_path.unlink(missing_ok=True)
        if stopped and status.engine in ENGINE_NAMES:
            engine(status.engine).stopped(self.state_dir)
        return stopped


@contextmanager
def kafka_or_embedded(state_dir: Path | str, *, engine_name: EngineName | None = None
                      ) -> Iterator[tuple[str, BrokerStatus | None]]:
    """Yield ``(bootstrap, status)``: ``KAFKA_BOOTSTRAP_SERVERS`` with ``None`` when it is set,
    else an embedded broker started in ``state_dir`` (tied to this process) and its status; the
    embedded broker is stopped on exit, also on an exception or Ctrl-C."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external, None
        return
    broker = EmbeddedBroker(state_dir, engine_name=engine_name)
    try:
        status = broker.start(tie_to_parent=True)
        yield status.bootstrap_servers or "", status
    finally:
        broker.stop()
