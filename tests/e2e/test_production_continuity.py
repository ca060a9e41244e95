"""Production continuity: a job started again resumes its last state; restore and checkpoint
failures on a running job fail it over; every case keeps the read_committed output exact.

* (the whole process tree SIGKILLed and started again with the same arguments, last state, is
  ``test_chart_started_worker.py``'s, through the chart's rendered arguments);
* stop-with-savepoint, a new version of the job code started in savepoint mode
  (``--from-savepoint``, the arguments the Helm chart renders for ``job.upgradeMode=savepoint``),
  then that process tree SIGKILLed and started again with the same arguments, then the restore
  API called on the running job (its newest checkpoint, at parallelism 3);
* a checkpoint timeout (a stage worker paused past it) with no tolerable failures.
"""

from __future__ import annotations

import time

import pytest

from pipeline_support import TOP_URLS, Milestone, pipeline, stage_pids, stopped, topics_for, verify_two_stage
from tidemark.local.pipeline import InputFeeder, wait_for
from upgraded_jobs import UPGRADED_ENV, UPGRADED_TOP_URLS

pytestmark = pytest.mark.timeout(900)


def registered_epochs(job) -> list[int]:
    return [e["epoch"] for e in job.events("attempt registered") if not e.get("finished")]


def start_fed_job(pipe, topics, bootstrap: str, checkpoints: int):
    """The job started on a fresh 4-partition input that is fed until the milestone is reached;
    returns once it completed ``checkpoints`` checkpoints: ``(job, milestone, feeder)``."""
    pipe.create_topic(topics.input, 4)
    job = pipe.start_job(TOP_URLS, topics.args())
    milestone = Milestone()
    feeder = InputFeeder(bootstrap, topics.input, total=2000, chunk=200, pause_s=1.0, until=milestone).start()
    wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= checkpoints, 300,
             f"{checkpoints} completed checkpoints")
    return job, milestone, feeder


def verified_output(pipe, topics, bootstrap: str, milestone: Milestone, feeder: InputFeeder):
    """Two more checkpoints, then the input stopped and the read_committed output checked against
    it: ``(records sent, verdict)``."""
    milestone.after_two_more_checkpoints(pipe, topics.job_id)
    records = feeder.join(timeout_s=600)
    return records, verify_two_stage(bootstrap, topics, records, timeout_s=300)


def test_stop_with_savepoint_upgrade_in_savepoint_mode_survives_a_sigkill_of_the_tree_and_a_restore_call(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        old, milestone, feeder = start_fed_job(pipe, topics, kafka_bootstrap, checkpoints=2)
        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        savepoint = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert savepoint["status"] == "COMPLETED", savepoint
        assert old.wait(timeout_s=120) == 0
        path = savepoint["metadata_path"]
        upgraded = pipe.start_job(UPGRADED_TOP_URLS, topics.args(), from_savepoint=path, env=UPGRADED_ENV)
        done = pipe.completed_checkpoints(topics.job_id)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= done + 2, 300, "2 checkpoints of the new version")
        upgraded.kill_tree()
        again = pipe.start_job(UPGRADED_TOP_URLS, topics.args(), from_savepoint=path, env=UPGRADED_ENV)
        done = pipe.completed_checkpoints(topics.job_id)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) > done, 300, "a checkpoint after the restart")
        # the restore API on the running job: its attempt replaced, at another parallelism
        newest = max(c["id"] for c in client.retained_checkpoints(topics.job_id)["checkpoints"])
        restored = client.restore(topics.job_id, parallelism=3, checkpoint_id=newest)
        wait_for(lambda: restored["epoch"] in registered_epochs(again), 240, "the restored attempt registered")
        records, verdict = verified_output(pipe, topics, kafka_bootstrap, milestone, feeder)  # its checkpoints go on
        state = next(j for j in client.jobs()["jobs"] if j["job"] == topics.job_id)
        first_start = upgraded.events("starting attempt")[0]
        restart, *_, last = again.events("starting attempt")
        newer = again.events("the job has newer state than the requested restore source; resuming it")
        replaced = again.events("restore issued through the API; replacing the attempt")
        again.stop()
    assert first_start["restore"] == path
    assert newer and restart["restore"] != path and "/chk-" in restart["restore"], restart
    assert replaced and replaced[0]["restore_epoch"] == restored["epoch"]
    assert last["epoch"] == restored["epoch"] and last["parallelism"] == 3
    assert last["restore"] == restored["metadata_path"]
    assert state["state"] == "RUNNING" and state["epoch"] == restored["epoch"]
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def test_checkpoint_timeout_fails_over_and_the_output_continues_exactly_once(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    timeout_ms = 30_000  # well above a checkpoint of this job on a loaded 2-core machine (the default is 10 min)
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2500", "TIDEMARK_CHECKPOINT__TIMEOUT_MS": str(timeout_ms),
           "TIDEMARK_CHECKPOINT__TOLERABLE_FAILURES": "0"}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env=env) as pipe:
        job, milestone, feeder = start_fed_job(pipe, topics, kafka_bootstrap, checkpoints=2)
        epoch = registered_epochs(job)[-1]
        [worker] = stage_pids(pipe.home, f"top_urls.epoch-{epoch}").values()
        with stopped(worker):  # until the failover kills it, or a second after the failover
            failed = wait_for(lambda: [e for e in job.events("attempt failed by the coordinator; failing over")
                                       if e["epoch"] == epoch], timeout_ms / 1000 + 30,
                              "the coordinator failing the paused attempt over")
            time.sleep(1)
        wait_for(lambda: any(e > epoch for e in registered_epochs(job)), 240, "a new attempt registered")
        records, verdict = verified_output(pipe, topics, kafka_bootstrap, milestone, feeder)
        job.stop()
    assert "exceed the tolerable 0" in failed[0]["reason"]
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
