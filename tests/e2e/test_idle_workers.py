"""Idle workers end to end (:mod:`tidemark.runtime.placement.idle_workers`): a run's worker process,
stopped with its job, waits idle with its SparkSession started; the next job on the machine takes
it (no new worker process, its log in the new run's directory) and is exactly once, and when that
job's supervisor is SIGKILLed, the restarted one adopts the process it took; once the code
it imported changes on disk, an idle worker refuses the next job, which starts a new process; an
idle worker nobody takes exits after ``keep_s``; workers started before any job
(``tidemark jobs warm-workers``) take the first job's attempt. Real broker, services, supervisors
and Spark."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pipeline_support import pipeline, topics_for, verify_single_stage

from tidemark.local.pipeline import InputFeeder, wait_for
from tidemark.processes import pid_alive

pytestmark = pytest.mark.timeout(600)

JOB_MODULE = "from tidemark.examples.access_log import url_counts  # a job module of the user's\n"


def _run(pipe, topics, records: int, *, supervisor_killed: bool = False) -> tuple[int, list[dict[str, Any]], Path]:
    """Run ``idle_job:url_counts`` on ``records`` records to its verified output, then stop it
    (``supervisor_killed``: SIGKILL the supervisor first, and stop the one that adopts its
    attempt): the pid of its worker process, the supervisor's log events and its run directory."""
    pipe.create_topic(topics.input, 2)
    args = topics.single_stage_args(parallelism=2)
    job = pipe.start_job("idle_job:url_counts", args)
    fed = InputFeeder(pipe.bootstrap, topics.input, total=records, chunk=100, pause_s=0.2, partitions=2).start()
    verdict = verify_single_stage(pipe.bootstrap, topics, fed.join(120), timeout_s=180)
    assert verdict.exactly_once, verdict
    (ready,) = list((pipe.home / "runs").glob(f"{topics.job_id}-*/count_hits.epoch-1.ready"))
    pid = int(json.loads(ready.read_text())["pid"])
    events = list(job.log_events())
    if supervisor_killed:
        job.process.kill()
        job.process.wait(30)
        job = pipe.start_job("idle_job:url_counts", args)
        wait_for(lambda: job.events("adopted the running attempt of a killed supervisor"), 60,
                 "the restarted supervisor adopting the worker it took from the idle workers")
    assert job.stop() == 143
    return pid, events, ready.parent


def test_the_next_job_takes_the_idle_worker_a_stopped_one_left_unless_its_code_changed(
        tmp_path, kafka_bootstrap, unique_name):
    code = tmp_path / "code"
    code.mkdir()
    (code / "idle_job.py").write_text(JOB_MODULE)
    env = {"PYTHONPATH": str(code), "TIDEMARK_IDLE_WORKERS__DIR": str(tmp_path / "idle"),
           "TIDEMARK_IDLE_WORKERS__KEEP_S": "20"}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env=env) as pipe:
        runs = iter(range(3))
        job_topics = lambda: topics_for(lambda name, run=next(runs): unique_name(f"{name}-{run}"))  # noqa: E731
        first, _, _ = _run(pipe, job_topics(), 300)
        wait_for(lambda: list((tmp_path / "idle").glob("*/*.json")), 30, "the first run's worker idle")
        second, events, run_dir = _run(pipe, job_topics(), 300, supervisor_killed=True)
        assert second == first, "the second job did not run in the first one's worker process"
        assert [e for e in events if e.get("event") == "an idle worker of an earlier run takes the attempt"]
        assert "taking the attempt" in (run_dir / "count_hits.log").read_text(), "its log is not in the new run's"

        wait_for(lambda: list((tmp_path / "idle").glob("*/*.json")), 30, "the second run's worker idle")
        later = time.time() + 5
        os.utime(code / "idle_job.py", (later, later))  # the job's code changed on disk
        third, events, _ = _run(pipe, job_topics(), 200)
        assert third != second, "a worker whose imported code changed ran the next job"
        assert not [e for e in events if e.get("event") == "an idle worker of an earlier run takes the attempt"]
        wait_for(lambda: not pid_alive(second), 10, "the refusing idle worker gone")

        wait_for(lambda: list((tmp_path / "idle").glob("*/*.json")), 30, "the third run's worker idle")
        wait_for(lambda: not pid_alive(third), 40, "the idle worker nobody took gone after keep_s")
        assert not list((tmp_path / "idle").glob("*/*.json")), "an expired worker left its registration"


def test_workers_started_before_any_job_take_the_first_one(tmp_path, kafka_bootstrap, unique_name):
    code = tmp_path / "code"
    code.mkdir()
    (code / "idle_job.py").write_text(JOB_MODULE)
    idle = tmp_path / "idle"
    env = {"PYTHONPATH": str(code), "TIDEMARK_IDLE_WORKERS__DIR": str(idle), "TIDEMARK_IDLE_WORKERS__KEEP_S": "20"}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env=env) as pipe:
        command_env = pipe.command_env()
        warm = subprocess.run([sys.executable, "-m", "tidemark.cli", "jobs", "warm-workers", "--count", "1",
                               "--keep-s", "120"], env=command_env, capture_output=True, text=True, timeout=300)
        (registration,) = list(idle.glob("*/*.json"))
        pre_started = int(registration.stem)
        try:
            assert warm.returncode == 0, warm.stderr
            assert "1 worker process(es) warm" in warm.stdout, warm.stdout
            pid, events, run_dir = _run(pipe, topics_for(unique_name), 300)
            assert pid == pre_started, "the first job did not run in the pre-started worker"
            assert [e for e in events if e.get("event") == "an idle worker of an earlier run takes the attempt"]
            assert "taking the attempt" in (run_dir / "count_hits.log").read_text(), "its log is not in the run's"
        finally:
            if pid_alive(pre_started):
                os.kill(pre_started, signal.SIGKILL)
