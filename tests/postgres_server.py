"""A PostgreSQL server for the tests: ``TIDEMARK_TEST_POSTGRES_DSN`` names an existing one (it
must allow prepared transactions), else one is started from Debian's packages in a temporary
directory (``initdb``, then the server as a child of the test process, as the ``postgres`` user
when the tests run as root, on a free loopback port, with prepared transactions allowed) and
stopped at the end."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tidemark.processes import die_with_parent, free_port

DSN_VARIABLE = "TIDEMARK_TEST_POSTGRES_DSN"


def _binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"{name} not found: install Debian's postgresql package "
                           f"(scripts/install-system-deps.sh) or set {DSN_VARIABLE}")
    return found


def _server_user() -> dict[str, str]:
    """PostgreSQL refuses to run as root: as root, it runs as the package's ``postgres`` user."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """The DSN of a server for the test session (see the module). The server is a child of the
    test process that dies with it (a killed test run leaves no server behind)."""
    named = os.environ.get(DSN_VARIABLE)
    if named:
        yield named
        return
    root = Path(tempfile.mkdtemp(prefix="tidemark-postgres-"))
    data, port = root / "data", free_port()
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = None
    try:
        subprocess.run([_binary("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "--no-sync"],
                       check=True, capture_output=True, timeout=120, **_server_user())  # type: ignore[call-overload]
        with open(root / "log", "wb") as log:
            server = subprocess.Popen(  # type: ignore[call-overload]
                [_binary("postgres"), "-D", str(data), "-c", "listen_addresses=127.0.0.1", "-p", str(port),
                 "-c", f"unix_socket_directories={root}", "-c", "max_prepared_transactions=64",
                 "-c", "fsync=off", "-c", "synchronous_commit=off"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
                **_server_user())
        dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        _wait_accepting(dsn, server, root / "log")
        yield dsn
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)  # fast shutdown
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(root, ignore_errors=True)


def _wait_accepting(dsn: str, server: subprocess.Popen[bytes], log: Path, timeout_s: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout_s
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited with {server.returncode}: {log.read_text(errors='replace')[-2000:]}")
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
