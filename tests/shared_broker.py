"""One embedded broker for every lane of a ``pytest -n N`` run.

A broker costs a JVM start and a few percent of a core while it idles; each xdist lane starting
its own made three of them under ``make test``. Here the first lane that needs a broker starts a
**keeper** (this file run as a program): a detached process that starts the embedded broker tied
to itself (:func:`tidemark.broker.embedded.kafka_or_embedded`), writes its bootstrap address to
``broker.json`` in the run's shared temporary directory, and stops it once the pytest process that
runs the lanes is gone (at the end of the run, or when it is killed). The other lanes read the
address; a file lock makes one lane the starter. Tests that kill or pause a broker start their own.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tidemark.processes import pid_alive

READY_TIMEOUT_S = 240.0


def shared_broker(root: Path, owner_pid: int) -> str:
    """The bootstrap address of the broker of the run whose lanes share ``root``, started (by a
    keeper living as long as ``owner_pid``) when no lane started it yet."""
    info, log = root / "broker.json", root / "broker-keeper.log"
    with open(root / "broker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if info.exists():
            known = json.loads(info.read_text())
            if pid_alive(known["keeper"]):
                return str(known["bootstrap"])
            info.unlink()
        with open(log, "ab") as out:
            keeper = subprocess.Popen([sys.executable, __file__, str(root / "broker"), str(info), str(owner_pid)],
                                      stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not info.exists():
            if keeper.poll() is not None or time.monotonic() > deadline:
                keeper.kill()
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the shared test broker did not start (keeper exit {keeper.poll()}):\n{tail}")
            time.sleep(0.2)
        return str(json.loads(info.read_text())["bootstrap"])


def _keep(state_dir: Path, info: Path, owner_pid: int) -> None:
    from tidemark.broker.embedded import kafka_or_embedded

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    with kafka_or_embedded(state_dir) as (bootstrap, _):
        partial = info.with_suffix(".partial")
        partial.write_text(json.dumps({"bootstrap": bootstrap, "keeper": os.getpid()}))
        partial.rename(info)
        while pid_alive(owner_pid) and not stopping:
            time.sleep(1.0)
    info.unlink(missing_ok=True)


if __name__ == "__main__":
    _keep(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
