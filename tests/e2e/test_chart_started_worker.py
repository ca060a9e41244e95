"""The Helm chart renders a worker whose restart resumes the last state.

The chart is rendered (helm-python-sdk, as ``tests/deploy``), and the worker container's
arguments and environment are run here as they are (``chart_pods``). It runs twice, as a pod does when it is lost: first start, SIGKILL of the
whole process tree mid-run, second start with the same arguments and environment; the
read_committed output must then be exact, record by record.

* ``job.upgradeMode=last-state`` (the default): the second start resumes the newest checkpoint;
  then a ``--fresh`` start over the committed output is refused in one line (exit 3);
* ``job.upgradeMode=stateless``: the first start is empty (``--fresh --start-id <id>``) and
  records its start id; the second, with the same start id, resumes instead of being refused;
  a new deployment (another image, so another start id) starts empty and is refused (exit 3)
  because the output already holds committed results.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from chart_pods import (QUICK_START_EXTRA_ENV, TOKEN, LocalPod, RenderedContainer, local_pod, render_worker,
                        start_container)
from pipeline_support import TOP_URLS, Milestone, Topics, pipeline, topics_for, verify_two_stage
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, wait_for

pytestmark = pytest.mark.timeout(900)

def chart_values(pipe: LocalPipeline, topics: Topics, **job: str) -> dict[str, Any]:
    """The job and the deployment's topic prefix; one broker, so replication factor 1; the pods' Spark drivers
    with the quick-start settings (``chart_pods.QUICK_START_EXTRA_ENV``)."""
    return {"topicPrefix": pipe.cluster.topic_prefix, "kafka": {"replicationFactor": 1},
            "worker": {"job": TOP_URLS, "jobArgs": topics.args(), "stages": 2, "extraEnv": QUICK_START_EXTRA_ENV},
            "job": job}


def kill_and_start_again(pipe: LocalPipeline, topics: Topics, worker: RenderedContainer, pod: LocalPod,
                         kafka_bootstrap: str) -> tuple[JobRun, JobRun, Any, list[bytes], int]:
    """First start, SIGKILL of the tree after 3 checkpoints, second start with the same
    arguments and environment, 2 more checkpoints; the verdict on the output."""
    first = start_container(pipe, worker, pod)
    milestone = Milestone()
    feeder = InputFeeder(kafka_bootstrap, topics.input, total=2000, chunk=200, pause_s=1.0, until=milestone).start()
    wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 3, 300, "3 completed checkpoints")
    killed = first.kill_tree()
    assert len(killed) >= 3  # the supervisor and both stage workers (and the first stage's JVM)
    sent_at_kill = len(feeder.records)
    again = start_container(pipe, worker, pod)  # what the restarted pod runs
    milestone.after_two_more_checkpoints(pipe, topics.job_id)
    records = feeder.join(timeout_s=600)
    verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
    return first, again, verdict, records, sent_at_kill


def test_chart_last_state_worker_resumes_after_a_sigkill_of_the_tree(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        worker = render_worker(chart_values(pipe, topics))
        assert worker.args == ["jobs", "run", TOP_URLS, "--job-args", json.dumps(topics.args(), separators=(",", ":"),
                               sort_keys=True), "--max-restarts", "10"]  # no --fresh, no --from-*
        pod = local_pod(pipe, worker, tmp_path / "pod")
        first, again, verdict, records, sent_at_kill = kill_and_start_again(pipe, topics, worker, pod, kafka_bootstrap)
        started = first.events("starting attempt")
        resumed = again.events("resuming the job's last state")
        restarted = again.events("starting attempt")
        again.stop()
        fresh = pipe.start_job(TOP_URLS, topics.args(), fresh=True)  # a --fresh start over that output
        refused = fresh.wait(timeout_s=120)
        fresh_log = fresh.log_path.read_text()
    assert started[0]["restore"] is None  # nothing retained yet: the first start is empty
    assert resumed and restarted[0]["restore"] is not None and "/chk-" in restarted[0]["restore"], restarted[:1]
    assert len(records) > sent_at_kill  # input kept arriving across the kill
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
    assert refused == 3, fresh_log[-2000:]
    line = next(li for li in fresh_log.splitlines() if li.startswith("tidemark jobs run:"))
    assert "--fresh would write results again" in line and topics.output in line and "--force" in line


def test_chart_stateless_worker_resumes_on_restart_and_a_new_deployment_starts_empty(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        worker = render_worker(chart_values(pipe, topics, upgradeMode="stateless"))
        assert worker.args[:-3] == ["jobs", "run", TOP_URLS, "--job-args",
                                    json.dumps(topics.args(), separators=(",", ":"), sort_keys=True),
                                    "--max-restarts", "10"]
        assert worker.args[-3:-1] == ["--fresh", "--start-id"]
        start_id = worker.args[-1]
        pod = local_pod(pipe, worker, tmp_path / "pod")
        first, again, verdict, records, _ = kill_and_start_again(pipe, topics, worker, pod, kafka_bootstrap)
        recorded = first.events("fresh start recorded")
        started = first.events("starting attempt")
        resumed = again.events("restart of a fresh start; resuming the job's last state")
        restarted = again.events("starting attempt")
        stopped = again.stop()
        record = json.loads((pipe.home / "checkpoints" / topics.job_id / "fresh-start.json").read_text())

        upgraded = render_worker({**chart_values(pipe, topics, upgradeMode="stateless"), "image": {"tag": "0.2.0"}})
        assert upgraded.args[:-1] == worker.args[:-1] and upgraded.args[-1] != start_id
        new_deployment = start_container(pipe, upgraded, local_pod(pipe, upgraded, tmp_path / "pod-2"))
        refused = new_deployment.wait(timeout_s=120)
        refused_log = new_deployment.log_path.read_text()
    assert recorded and recorded[0]["start_id"] == start_id and started[0]["restore"] is None
    assert record["start_id"] == start_id and record["baseline"] == recorded[0]["baseline"]
    assert resumed and resumed[0]["start_id"] == start_id and resumed[0]["checkpoint"] > record["baseline"]
    assert stopped == 143 and restarted[0]["restore"] is not None, restarted[:1]  # it ran until stopped
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
    assert refused == 3, refused_log[-2000:]
    line = next(li for li in refused_log.splitlines() if li.startswith("tidemark jobs run:"))
    assert "--fresh would write results again" in line and topics.output in line
