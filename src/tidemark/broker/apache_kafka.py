"""The Apache Kafka engine: a single-node KRaft broker (combined broker and controller) run from
the jars of Apache Kafka's own Maven artifacts.

First start in a state directory: fetch ``org.apache.kafka:kafka_2.13:KAFKA_VERSION`` and its
runtime dependencies with Maven into the cache (once per machine, :mod:`tidemark.maven`),
write ``kafka/server.properties`` with two free ports (client and controller) and settings fit for
one node, and format ``kafka/data`` as KRaft storage with a fresh cluster id. Later starts in the
same state directory reuse the ports, the properties and the data: topics, committed offsets and
transactions survive a restart, including one after SIGKILL (Kafka recovers its logs).

The broker's log4j output goes to the process's stdout (the embedded lifecycle writes it to
``broker.log``) at WARN, with Kafka's start/stop lines at INFO.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from tidemark.broker.class_archive import PARTIAL, adopt_partial, archive_options, archive_path
from tidemark.broker.engine import EmbeddedBrokerError, EngineName, LaunchPlan
from tidemark.maven import MavenFetchError, fetch_classpath
from tidemark.jvm import QUICK_START_JVM_OPTIONS, java_binary
from tidemark.processes import free_port

KAFKA_VERSION = "4.1.2"
SCALA_VERSION = "2.13"
LOG4J_VERSION = "2.24.3"  # the log4j2 Kafka 4.1 is built against; the slf4j binding Kafka's distribution ships
ARTIFACTS = (
    f"org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION}",
    f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}",
)
JVM_OPTIONS = (
    "-Xms256m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    QUICK_START_JVM_OPTIONS,  # a development broker
)

# One node: replication factor 1 everywhere, no rebalance delay, few internal partitions (fast
# first group join and first transaction), topics only when created on purpose.
BROKER_SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "10",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # a restart after SIGKILL waits for the dead incarnation's session to expire before serving
    # (then retries its registration within half of it): 1.5 s instead of 9 s, the broker
    # heartbeating three times a session (docs/operations.md). Heartbeats and the controller's
    # no-op records of an idle metadata log (one every 5 s instead of 0.5 s) are most of an idle
    # broker's CPU: with these it takes 2.3% of a core instead of 3.6% with heartbeats every
    # 0.2 s and no-op records every 0.5 s
    "broker.session.timeout.ms": "1500",
    "broker.heartbeat.interval.ms": "500",
    "metadata.max.idle.interval.ms": "5000",
    "auto.create.topics.enable": "false",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "background.threads": "4",
    "log.retention.check.interval.ms": "30000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "5000",
}

LOG4J_PROPERTIES = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
"""


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, not starting with '-'."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not value.startswith("-"):
            return value


def _java() -> str:
    java = java_binary()
    if java is None:
        raise EmbeddedBrokerError("Java (17 or newer) is not installed; run scripts/install-system-deps.sh")
    return java


def read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def server_properties(data_dir: Path, port: int, controller_port: int) -> dict[str, str]:
    return {
        **BROKER_SETTINGS,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(data_dir),
    }


class ApacheKafkaEngine:
    name: EngineName = "kafka"
    persistent = True

    def __init__(self, cache_dir: Path | None = None) -> None:
        self.cache_dir = cache_dir

    @staticmethod
    def _paths(state_dir: Path) -> tuple[Path, Path, Path]:
        root = state_dir / "kafka"
        return root / "server.properties", root / "data", root / "log4j2.properties"

    def _classpath(self, progress: Callable[[str], None]) -> tuple[Path, float]:
        try:
            return fetch_classpath(f"kafka-{KAFKA_VERSION}", ARTIFACTS, self.cache_dir, progress=progress)
        except MavenFetchError as exc:
            raise EmbeddedBrokerError(str(exc)) from None

    def saved_port(self, state_dir: Path) -> int | None:
        properties, _, _ = self._paths(state_dir)
        if not properties.exists():
            return None
        listener = read_properties(properties).get("advertised.listeners", "")
        try:
            return int(listener.rsplit(":", 1)[1])
        except (IndexError, ValueError):
            return None

    def prepare(self, state_dir: Path, port: int, progress: Callable[[str], None]) -> LaunchPlan:
        libs, fetch_s = self._classpath(progress)
        properties, data_dir, log4j = self._paths(state_dir)
        properties.parent.mkdir(parents=True, exist_ok=True)
        controller_port = self._controller_port(properties, port)
        values = server_properties(data_dir.resolve(), port, controller_port)
        properties.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
        log4j.write_text(LOG4J_PROPERTIES)
        java = _java()
        classpath = f"{libs.resolve()}/*"
        format_s = 0.0
        if not (data_dir / "meta.properties").exists():
            format_s = self._format(java, classpath, properties, data_dir, log4j)
        classes = archive_options(archive_path(java, libs), properties.parent / PARTIAL)
        argv = [java, *JVM_OPTIONS, *classes, f"-Dlog4j2.configurationFile={log4j.resolve()}",
                "-cp", classpath, "kafka.Kafka", str(properties.resolve())]
        return LaunchPlan(argv=argv, env={}, fetch_s=fetch_s, format_s=format_s, ready_timeout_s=90.0)

    def stopped(self, state_dir: Path) -> None:
        """The broker of ``state_dir`` is gone: keep the class archive its JVM wrote at exit, if any
        (:mod:`tidemark.broker.class_archive`)."""
        partial = self._paths(state_dir)[0].parent / PARTIAL
        if partial.is_file():
            libs, _ = self._classpath(lambda _: None)
            java = _java()
            adopt_partial(java, JVM_OPTIONS, f"{libs.resolve()}/*", partial, archive_path(java, libs))

    @staticmethod
    def _controller_port(properties: Path, port: int) -> int:
        if properties.exists():
            voters = read_properties(properties).get("controller.quorum.voters", "")
            try:
                return int(voters.rsplit(":", 1)[1])
            except (IndexError, ValueError):
                pass
        while (controller_port := free_port()) == port:
            pass
        return controller_port

    @staticmethod
    def _format(java: str, classpath: str, properties: Path, data_dir: Path, log4j: Path) -> float:
        started = time.monotonic()
        shutil.rmtree(data_dir, ignore_errors=True)  # a half-formatted folder from an interrupted start
        argv = [java, "-Xmx256m", f"-Dlog4j2.configurationFile={log4j.resolve()}", "-cp", classpath,
                "kafka.tools.StorageTool", "format", "-t", cluster_id(), "-c", str(properties.resolve())]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
            raise EmbeddedBrokerError(f"formatting Kafka storage in {data_dir} failed (exit {done.returncode}):\n{tail}")
        return time.monotonic() - started
