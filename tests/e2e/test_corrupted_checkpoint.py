"""A corrupted newest checkpoint: the failed-over job stops with an error naming the checkpoint and
the file, at once (no restore loop), and nothing duplicated reaches the read_committed output. A
new start on a corrupted newest ``_metadata`` is refused with one line and exit code 3. The
operator's ways back: discard the corrupted checkpoint (``tidemark checkpoints discard``), after
which a start restores the newest one left; or allow a fallback (``TIDEMARK_RESTORE_FALLBACK=true``).
Either way the older checkpoint is restored because the commit markers show none of the skipped
checkpoint's output was committed, and the output stays exactly once record by record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline_support import TOP_URLS, URL_COUNTS, pipeline, stage_pids, stopped, topics_for, verify_single_stage
from tidemark.checkpoint_store.store import state_files
from tidemark.examples.generator import expected_top_urls, generate, produce
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.local.pipeline import InputFeeder, wait_for
from tidemark.checkpoint_store.catalog import list_retained
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


def _discard(pipe, job: str, checkpoint_id: int) -> subprocess.CompletedProcess:  # noqa: ANN001
    """The documented command, as an operator runs it."""
    env = {**os.environ, **pipe.env, "TIDEMARK_COORDINATOR_URL": pipe.coordinator_url}
    return subprocess.run([sys.executable, "-m", "tidemark.cli", "checkpoints", "discard", job, str(checkpoint_id)],
                          env=env, capture_output=True, text=True, timeout=90)


def test_a_corrupted_newest_checkpoint_stops_the_job_naming_checkpoint_and_file(tmp_path, kafka_bootstrap,
                                                                               unique_name):
    """A state file corrupted at a failover (a flipped ``_metadata`` bit: the next test's start;
    every kind of corruption against the restore rules: tests/unit/checkpoint_store/test_corruption.py)."""
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        pipe.create_topic(topics.channel, 4)
        job = pipe.start_job(TOP_URLS, topics.args(), max_restarts=5)
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1200, chunk=200, pause_s=0.8).start()
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 3, 240, "three checkpoints")
        # hold the supervisor, kill a stage: no checkpoint can complete any more, none is restored yet
        with stopped(job.process.pid):
            [worker] = stage_pids(tmp_path / "home", "top_urls.epoch-*").values()  # started, or an idle one taken
            os.kill(worker, signal.SIGKILL)
            time.sleep(3)
            root = (tmp_path / "home" / "checkpoints").resolve()
            newest = list_retained(open_storage(root.as_uri()), topics.job_id, savepoints=False).entries[-1]
            damaged = _flip_state_file(root, newest.metadata)
        started = time.monotonic()
        code = job.wait(timeout_s=120)
        stopped_after_s = time.monotonic() - started
        records = feeder.join(timeout_s=120)
        output = read_committed(kafka_bootstrap, topics.output, expect=len(expected_top_urls(records)), timeout_s=20)
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


def test_a_start_on_a_corrupted_newest_metadata_is_refused_in_one_line_until_discarded_or_a_fallback_is_allowed(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    first, second = (lambda records: (records[:300], records[300:]))(list(generate(600)))
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(URL_COUNTS, topics.single_stage_args())
        produce(kafka_bootstrap, topics.input, first, 4, chunk=100)
        assert verify_single_stage(kafka_bootstrap, topics, first, timeout_s=240).exactly_once
        # checkpoints after the last output commit nothing: falling back to one of them is safe
        idle_from = pipe.completed_checkpoints(topics.job_id)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= idle_from + 3, 120, "idle checkpoints")
        assert job.stop() == 143
        root = (tmp_path / "home" / "checkpoints").resolve()
        newest = list_retained(open_storage(root.as_uri()), topics.job_id, savepoints=False).entries[-1]
        damaged = _flip_metadata_bit(root, newest.path)

        refused = pipe.start_job(URL_COUNTS, topics.single_stage_args())
        code = refused.wait(timeout_s=120)
        refused_log = refused.log_path.read_text(errors="replace")
        assert code == 3, refused_log[-3000:]
        assert "Traceback" not in refused_log
        [line] = [ln for ln in refused_log.splitlines() if ln.startswith("tidemark jobs run:")]
        assert line.startswith(f"tidemark jobs run: checkpoint {newest.metadata.checkpoint_id} is corrupted: "
                               f"{damaged}: "), line
        assert refused.events("restore issued") == [] and refused.events("starting attempt") == []

        # the documented remedy: discard it; the next start restores the newest checkpoint left
        # (it was refused as older than the discarded one, again and again, before the coordinator
        # folded the discard)
        discarded = _discard(pipe, topics.job_id, newest.metadata.checkpoint_id)
        assert discarded.returncode == 0, discarded.stderr
        left = list_retained(open_storage(root.as_uri()), topics.job_id, savepoints=False).entries[-1]
        assert left.metadata.checkpoint_id < newest.metadata.checkpoint_id and not (root / newest.path).exists()
        after_discard = pipe.start_job(URL_COUNTS, topics.single_stage_args())
        wait_for(lambda: after_discard.events("restore issued"), 120, "the restore of the newest checkpoint left")
        [restored_left] = after_discard.events("restore issued")
        resumed_from = pipe.completed_checkpoints(topics.job_id)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= resumed_from + 2, 120, "its checkpoints")
        assert after_discard.stop() == 143
        assert restored_left["checkpoint"] == left.metadata.checkpoint_id, restored_left

        newest = list_retained(open_storage(root.as_uri()), topics.job_id, savepoints=False).entries[-1]
        _flip_metadata_bit(root, newest.path)
        resumed = pipe.start_job(URL_COUNTS, topics.single_stage_args(),
                                 env={"TIDEMARK_RESTORE_FALLBACK": "true"})
        wait_for(lambda: resumed.events("restore issued"), 120, "the fallback restore")
        produce(kafka_bootstrap, topics.input, second, 4, chunk=100)
        verdict = verify_single_stage(kafka_bootstrap, topics, first + second, timeout_s=240)
        fell_back = resumed.events("falling back to an older checkpoint")
        [restore] = resumed.events("restore issued")
        assert resumed.stop() == 143
    assert len(fell_back) == 1 and fell_back[0]["corrupted"] == newest.metadata.checkpoint_id, fell_back
    assert restore["checkpoint"] == fell_back[0]["checkpoint"] < newest.metadata.checkpoint_id
    assert verdict.exactly_once, verdict  # no duplicate, no gap, record by record
