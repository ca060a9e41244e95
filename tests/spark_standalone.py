"""A Spark standalone cluster for tests (the ``spark_cluster`` fixture): one master and one worker from
PySpark's own distribution.

``standalone_cluster(root)`` starts ``org.apache.spark.deploy.master.Master`` and
``org.apache.spark.deploy.worker.Worker`` through the ``bin/spark-class`` of the installed
``pyspark`` package (its ``jars/`` hold the whole of Spark: nothing is downloaded), both on
127.0.0.1 on free ports, the worker with one core and a little memory. It yields once the
worker has registered with the master (the master's JSON at ``<master_ui>/json/``), and on the way
out stops both, the worker's executors and their Python workers with them: each daemon leads a
process group of its own, which is SIGTERMed and then SIGKILLed, so nothing is left behind.

The worker's executors inherit its environment: the test process's (``PYTHONPATH`` included),
so their Python workers import the same tidemark as the driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from tidemark.jvm import QUICK_START_JVM_OPTIONS, find_java_home
from tidemark.local.pipeline import wait_for
from tidemark.processes import die_with_parent, free_port, pid_alive, stop_processes, tree_pids

SPARK_HOME = Path(pyspark.__file__).resolve().parent
REGISTER_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class StandaloneCluster:
    """A running master and worker: where to reach them and what they started."""

    master_url: str  # spark://127.0.0.1:<port>, a session's master
    master_ui: str  # http://127.0.0.1:<port> of the master's web UI (its JSON at /json/)
    worker_ui: str
    work_dir: Path  # the worker's: <app id>/<executor id>/stderr is an executor's log
    master: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]

    def master_state(self) -> dict[str, Any]:
        return _json(f"{self.master_ui}/json/")

    def worker_state(self) -> dict[str, Any]:
        return _json(f"{self.worker_ui}/json/")

    def executor_log(self, app_id: str, executor_id: str) -> str:
        """The stderr of executor ``executor_id`` of application ``app_id`` on this worker."""
        return (self.work_dir / app_id / executor_id / "stderr").read_text(errors="replace")


def _json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _daemon(main_class: str, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), main_class, *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=die_with_parent)


def _registered(master_ui: str, daemons: list[subprocess.Popen[bytes]], logs: list[Path]) -> bool:
    for daemon, log in zip(daemons, logs):
        if daemon.poll() is not None:
            raise RuntimeError(f"{log.stem} exited with {daemon.returncode}: {log.read_text(errors='replace')[-2000:]}")
    try:
        state = _json(f"{master_ui}/json/")
    except OSError:  # not serving yet
        return False
    return any(worker["state"] == "ALIVE" for worker in state["workers"])


@contextlib.contextmanager
def standalone_cluster(root: Path, cores: int = 1, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A master and a worker of ``cores`` and ``memory`` under ``root``, registered (see the module)."""
    (root / "conf").mkdir(parents=True, exist_ok=True)  # no spark-defaults.conf, spark-env.sh of the machine's
    work_dir = root / "work"
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_CONF_DIR": str(root / "conf"),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
           "SPARK_DAEMON_JAVA_OPTS": QUICK_START_JVM_OPTIONS}
    java_home = find_java_home()
    if java_home:
        env["JAVA_HOME"] = java_home
    master_port, master_ui_port, worker_port, worker_ui_port = (free_port() for _ in range(4))
    master_url = f"spark://127.0.0.1:{master_port}"
    logs = [root / "master.log", root / "worker.log"]
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        daemons.append(_daemon("org.apache.spark.deploy.master.Master",
                               ["--host", "127.0.0.1", "--port", str(master_port),
                                "--webui-port", str(master_ui_port)], env, logs[0]))
        daemons.append(_daemon("org.apache.spark.deploy.worker.Worker",
                               ["--host", "127.0.0.1", "--port", str(worker_port), "--webui-port", str(worker_ui_port),
                                "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir), master_url],
                               env, logs[1]))
        master_ui = f"http://127.0.0.1:{master_ui_port}"
        wait_for(lambda: _registered(master_ui, daemons, logs), REGISTER_TIMEOUT_S, "the Spark worker registered")
        yield StandaloneCluster(master_url, master_ui, f"http://127.0.0.1:{worker_ui_port}", work_dir, *daemons)
    finally:
        _stop(daemons)


def _stop(daemons: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM the worker (which stops its executors) and the master, then SIGKILL whatever of
    their process groups, or of the processes they had started, still runs."""
    started = [pid for daemon in daemons for pid in tree_pids(daemon.pid)]
    stop_processes(list(reversed(daemons)), timeout_s=15.0)
    for daemon in daemons:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGKILL)
    left = [pid for pid in started if pid_alive(pid)]
    for pid in left:  # a descendant that left the group
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if left:
        wait_for(lambda: not any(pid_alive(pid) for pid in left), 10.0, f"the cluster's processes {left} gone")
