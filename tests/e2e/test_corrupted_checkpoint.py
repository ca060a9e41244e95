"""A corrupted newest checkpoint: the failed-over job stops with an error naming the checkpoint and
the file, at once (no restore loop), and nothing duplicated reaches the read_committed output."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from pipeline_support import TOP_URLS, pipeline, topics_for
from tidemark.checkpoint_store.store import state_files
from tidemark.examples.generator import expected_top_urls
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.local.pipeline import InputFeeder, wait_for
from tidemark.operator.catalog import list_retained
from tidemark.storage import open_storage

pytestmark = pytest.mark.timeout(600)


def _flip_state_file(root, metadata) -> str:  # noqa: ANN001
    path = next(f.path for f in state_files(metadata) if not f.shared)
    data = bytearray((root / path).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (root / path).write_bytes(bytes(data))
    return path


def _flip_metadata_bit(root, metadata_path) -> str:  # noqa: ANN001
    data = bytearray((root / metadata_path).read_bytes())
    data[-3] ^= 0x01
    (root / metadata_path).write_bytes(bytes(data))
    return metadata_path


def _worker_pid(supervisor: int, stage: str) -> int:
    """The stage worker the supervisor started (a child whose command line names the stage)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == supervisor and b"--stage" in args and args[args.index(b"--stage") + 1] == stage.encode():
            return int(entry.name)
    raise LookupError(f"no worker of stage {stage} under process {supervisor}")


@pytest.mark.parametrize("corruption", ["state-file", "metadata-bit"])
def test_a_corrupted_newest_checkpoint_stops_the_job_naming_checkpoint_and_file(tmp_path, kafka_bootstrap,
                                                                               unique_name, corruption):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        pipe.create_topic(topics.channel, 4)
        job = pipe.start_job(TOP_URLS, topics.args(), max_restarts=5)
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1200, chunk=100, pause_s=0.4).start()
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 3, 240, "three checkpoints")
        # hold the supervisor, kill a stage: no checkpoint can complete any more, none is restored yet
        os.kill(job.process.pid, signal.SIGSTOP)
        try:
            os.kill(_worker_pid(job.process.pid, "top_urls"), signal.SIGKILL)
            time.sleep(3)
            root = (tmp_path / "home" / "checkpoints").resolve()
            newest = list_retained(open_storage(root.as_uri()), topics.job_id, savepoints=False).entries[-1]
            damaged = (_flip_state_file(root, newest.metadata) if corruption == "state-file"
                       else _flip_metadata_bit(root, newest.path))
        finally:
            os.kill(job.process.pid, signal.SIGCONT)
        started = time.monotonic()
        code = job.wait(timeout_s=120)
        stopped_after_s = time.monotonic() - started
        records = feeder.join(timeout_s=120)
        output = read_committed(kafka_bootstrap, topics.output, expect=len(records), timeout_s=20)
        refused = job.events("restore refused")
        attempts = job.events("starting attempt")
        restores = job.events("restore issued")
        log_text = job.log_path.read_text(errors="replace")
    verdict = verify_top_urls(output, expected_top_urls(records))
    assert code == 3, log_text[-3000:]
    assert len(refused) == 1 and len(attempts) == 1 and restores == [], (refused, attempts, restores)
    assert f"checkpoint {newest.metadata.checkpoint_id} is corrupted: {damaged}: " in refused[0]["error"]
    assert stopped_after_s < 60
    assert verdict.duplicates == 0 and verdict.unexpected == 0, verdict
