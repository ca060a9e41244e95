"""The README's "Everyday commands" run as written, in order, on a fresh directory.

The block is parsed from README.md itself, so README and test cannot drift. It runs as one bash
script (``set -euo pipefail``: any failing command fails it) in a scratch directory whose
``.venv`` is a link to this interpreter's virtualenv, so ``.venv/bin/tidemark`` is the command the
README names and ``.tidemark/`` the state it creates: its own broker, started by its own
``broker start``. Only the environment is prepared: no ``KAFKA_BOOTSTRAP_SERVERS`` or
``TIDEMARK_HOME``, and the settings the local pipeline's jobs run with (the quick-start settings of
:mod:`tidemark.local.quick_start`, checkpoints every 2 s). Afterwards nothing it started runs any
more.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline_support import processes_mentioning
from tidemark.local.quick_start import QUICK_START_ENV
from tidemark.processes import port_free

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1800)]

README = Path(__file__).resolve().parents[2] / "README.md"
SERVICE_PORTS = (9400, 9401)  # the coordinator's and checkpoint store's defaults, as the README uses them


def readme_block(section: str = "Everyday commands") -> str:
    """The first ```sh block under the README heading ``## <section>``."""
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    match = re.search(r"```sh\n(.*?)```", text[start:end if end != -1 else None], re.S)
    assert match, f"no ```sh block under '## {section}' in {README}"
    return match.group(1)


def commands(block: str) -> list[str]:
    """The block's commands: comment lines dropped, continued lines joined."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_block_is_the_documented_sequence():
    """The sequence the issue asks for, in this order; the other test runs it."""
    lines = commands(readme_block())
    order = ["broker start", "run coordinator", "topics create", "generate access-log", "jobs run",
             "verify top-urls", "savepoint trigger", "jobs run", "verify top-urls", "broker stop"]
    positions = []
    for step in order:
        start = positions[-1] + 1 if positions else 0
        position = next((i for i, line in enumerate(lines[start:], start) if f"tidemark {step}" in line), None)
        assert position is not None, f"'tidemark {step}' missing (after step {len(positions)}) in:\n" + "\n".join(lines)
        positions.append(position)
    assert "9092" not in readme_block()  # every command finds the broker itself
    assert all(line.rstrip().endswith("&") or "#" in line and line.split("#")[0].rstrip().endswith("&")
               for line in lines if " run " in line), "run <service> and jobs run stay in the foreground: use &"


def test_readme_everyday_commands_run_as_written(tmp_path):
    busy = [port for port in SERVICE_PORTS if not port_free(port)]
    assert not busy, f"ports {busy} are in use; the README's services need them"
    workdir = tmp_path / "clone"
    workdir.mkdir()
    (workdir / ".venv").symlink_to(sys.prefix)
    script = workdir / "everyday.sh"
    script.write_text("set -euo pipefail\nset -x\n" + readme_block())
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKA_BOOTSTRAP_SERVERS", "TIDEMARK_HOME")}
    env.update({"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000", **QUICK_START_ENV})
    started = time.monotonic()
    process = subprocess.Popen(["bash", str(script)], cwd=workdir, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=1500)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        deadline = time.monotonic() + 15  # a JVM may still be exiting
        while (leftover := processes_mentioning(str(workdir))) and time.monotonic() < deadline:
            time.sleep(0.5)
        subprocess.run([f"{sys.prefix}/bin/tidemark", "broker", "stop", "--home", str(workdir / ".tidemark")],
                       check=False, capture_output=True)
        for line in leftover:  # the broker among them is gone already
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
    logs = "".join(f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
                   for log in sorted((workdir / ".tidemark").glob("*.log")))
    assert process.returncode == 0, f"failed after {time.monotonic() - started:.0f}s:\n{output}{logs}"
    for line in commands(readme_block()):  # each one ran (set -x traced it)
        words = line.split("#")[0].split(">")[0].split("&&")[0].split()
        assert "+ " + " ".join(w for w in words if "$" not in w) in output, f"not run: {line}"
    assert "created topic access-log (4 partitions)" in output
    assert "wrote 2000 access-log records to access-log" in output
    assert output.count("\nexactly once\n") == 2 and "NOT exactly once" not in output, output
    assert "against the top_urls example on access-log (3000 input records)" in output
    assert output.count(": COMPLETED, id ") == 2, output  # both stop-with-savepoints completed
    assert "broker stopped" in output
    assert not leftover, "left running:\n" + "\n".join(leftover)
    assert not (workdir / ".tidemark" / "broker" / "broker.json").exists()
