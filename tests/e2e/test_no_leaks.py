"""No leaks over a run of 100 checkpoints: a single-stage job checkpoints every 0.4 s with retention
3 until 100 checkpoints completed.
While it runs, the job's checkpoint directories stay bounded (the retained ones plus the few in
flight or being discarded) and its workers' Spark temp folders do not multiply; once it stopped,
its checkpoint storage holds exactly the retained checkpoints' directories (discarded and aborted
ones leave no empty trees behind) and no Spark checkpoint folder of its workers remains in the
temp directory. The input rate is small: the run is about time and checkpoint count, not load."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from pipeline_support import URL_COUNTS, pipeline, retention_problems, stage_pids, topics_for

from tidemark.local.pipeline import InputFeeder, wait_for
from tidemark.spark.session import QUERY_DIR_PREFIX

pytestmark = pytest.mark.timeout(1200)

CHECKPOINTS = 100
MAX_S = 400  # for the 100 checkpoints, on a loaded machine
RETAINED = 3
IN_FLIGHT_ALLOWANCE = 3  # a checkpoint being written, one completing, one whose discard is under way
SAMPLE_EVERY_S = 5


def _query_dirs_of(home: Path) -> list[Path]:
    """Spark checkpoint folders in the temp directory of the workers of the runs under ``home``
    (``tidemark-query-<pid>-...``, pids from the workers' ready files)."""
    pids = set(stage_pids(home).values())
    assert pids, "no worker ready files found"
    return [d for pid in pids for d in Path(tempfile.gettempdir()).glob(f"{QUERY_DIR_PREFIX}{pid}-*")]


def _directories(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


def test_many_checkpoints_leave_only_the_retained_directories_and_no_temp_folders(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "400", "TIDEMARK_CHECKPOINT__TIMEOUT_MS": "10000",  # the one in flight at the stop aborts soon
           "TIDEMARK_RETAINED_CHECKPOINTS": str(RETAINED)}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env=env) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(URL_COUNTS, topics.single_stage_args())
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 1, 240, "the first checkpoint")
        started = time.monotonic()
        done = lambda: (pipe.completed_checkpoints(topics.job_id) >= CHECKPOINTS  # noqa: E731
                        or time.monotonic() - started > MAX_S)
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1, chunk=20, pause_s=1.0, until=done).start()
        storage_root = tmp_path / "home" / "checkpoints" / topics.job_id
        first_temp = _query_dirs_of(tmp_path / "home")
        assert first_temp, "the running worker's Spark checkpoint folder was not found"
        most_dirs, samples = 0, 0
        while not done():
            time.sleep(SAMPLE_EVERY_S)
            checkpoint_dirs = [p for p in storage_root.glob("chk-*") if p.is_dir()]
            most_dirs, samples = max(most_dirs, len(checkpoint_dirs)), samples + 1
            assert len(checkpoint_dirs) <= RETAINED + IN_FLIGHT_ALLOWANCE, sorted(p.name for p in checkpoint_dirs)
            assert len(_query_dirs_of(tmp_path / "home")) <= len(first_temp), "worker temp folders multiply"
        feeder.join(120)
        completed = pipe.completed_checkpoints(topics.job_id)
        assert completed >= CHECKPOINTS, f"only {completed} checkpoints completed in {MAX_S}s"
        assert samples >= 5 and most_dirs >= RETAINED
        assert job.stop() is not None
        wait_for(lambda: not retention_problems(tmp_path / "home", topics.job_id, RETAINED), 60, "retention")
        retained = sorted(p.parent.name for p in storage_root.glob("chk-*/_metadata"))
        assert len(retained) == RETAINED
        leftover = {d for d in _directories(storage_root)
                    if d.split("/")[0].startswith("chk-") and d.split("/")[0] not in retained}
        assert leftover == set(), f"directories of discarded checkpoints left behind: {sorted(leftover)[:10]}"
    assert _query_dirs_of(tmp_path / "home") == [], "worker temp folders left behind"
