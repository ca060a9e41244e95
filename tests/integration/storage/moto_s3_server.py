"""A real S3-compatible HTTP server for tests: moto's ``moto_server`` as a subprocess.

Lifecycle: ``MotoS3Server(log_path).start()`` spawns ``python -m moto.server`` on a free
127.0.0.1 port (the kernel kills it if the test process dies) and waits until it answers;
``stop()`` terminates it. The fixtures below wrap it: one server per test session, fresh dummy
credentials and a fresh bucket per test. Conftests import the fixtures they need from here.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.processes import die_with_parent, free_port

MOTO_PIN = "moto[server]==5.2.5"
REGION = "us-east-1"


class MotoS3Server:
    """One ``moto_server`` process; memory-only, so a restart loses every bucket."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.endpoint_url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout_s: float = 20.0) -> str:
        port = free_port()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
            )
        self.endpoint_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"moto_server exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                    return self.endpoint_url
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto_server did not answer within {ready_timeout_s}s")

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


def raw_client(endpoint_url: str):  # type: ignore[no-untyped-def]
    """A plain boto3 client on the test server, to look behind the storage's back."""
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint_url, region_name=REGION,
        aws_access_key_id="tidemark-test", aws_secret_access_key="tidemark-test",
    )


@pytest.fixture(scope="session")
def moto_s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("moto.server", reason=f"the S3 tests need {MOTO_PIN}")
    server = MotoS3Server(tmp_path_factory.mktemp("moto-s3") / "moto.log")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def s3_env(moto_s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the standard settings at the test server, with dummy credentials; its endpoint."""
    unset = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "TIDEMARK_S3__ADDRESSING_STYLE")
    for name in unset:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "tidemark-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "tidemark-test")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("TIDEMARK_S3__ENDPOINT_URL", moto_s3_endpoint)
    return moto_s3_endpoint


@pytest.fixture
def s3_bucket(s3_env: str) -> str:
    """A new, empty bucket on the test server."""
    name = f"tm-{uuid.uuid4().hex[:16]}"
    raw_client(s3_env).create_bucket(Bucket=name)
    return name
