"""The Helm chart with worker hosts (issue #14): W pods per stage, each knowing its tasks, and pod
restarts that keep the state.

The chart is rendered with ``worker.workers: 2`` and ``worker.hosts.enabled``: the worker
Deployment runs only the supervisor (``--worker-hosts``), and each of the two stages gets a
StatefulSet of two worker-host pods. Every pod runs here as a local process tree with its rendered
arguments and environment (``chart_pods``; pod ``n`` of a StatefulSet gets ``n`` as its index
label, as the downward API gives it). Input keeps arriving while

1. one host pod (``top_urls/1``) is SIGKILLed with its whole tree and started again with the same
   arguments, as Kubernetes restarts a lost pod: the supervisor sees the new incarnation, fails the
   attempt over, and every stage restores the newest checkpoint on the hosts;
2. then the supervisor's pod is SIGKILLed and started again: the new supervisor resumes the job's
   last state and hands the next attempt to the same hosts, which replace the processes they ran.

The read_committed output is exact, record by record. Each host runs one process (the first
stage's exchange reader fused into its worker) and lists on ``/targets`` (Prometheus's HTTP service
discovery) the one metrics port it serves, ``process-0``.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest

from chart_pods import QUICK_START_EXTRA_ENV, TOKEN, local_pod, render_workers, start_container
from pipeline_support import TOP_URLS, Milestone, pipeline, topics_for, verify_two_stage
from tidemark.admin.client import CoordinatorClient
from tidemark.local.pipeline import InputFeeder, JobRun, wait_for

pytestmark = pytest.mark.timeout(1200)  # three attempts of cold workers; under make test the machine is shared


def test_chart_worker_hosts_run_each_stage_on_two_pods_and_pod_restarts_keep_the_state(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        values = {"topicPrefix": pipe.cluster.topic_prefix, "kafka": {"replicationFactor": 1},
                  "worker": {"job": TOP_URLS, "jobArgs": topics.args(), "stages": 2, "workers": 2,
                             "hosts": {"enabled": True}, "standby": False,
                             "extraEnv": QUICK_START_EXTRA_ENV}}
        rendered = render_workers(values)
        supervisor = rendered.pop("tidemark-worker")
        assert sorted(rendered) == ["tidemark-worker-s0", "tidemark-worker-s1"]
        pods = {f"{name}-{n}": (container, local_pod(pipe, container, tmp_path / f"{name}-{n}", pod_index=n))
                for name, container in rendered.items() for n in range(2)}
        hosts: dict[str, JobRun] = {pod: start_container(pipe, container, local, pod)
                                    for pod, (container, local) in pods.items()}
        supervisor_pod = local_pod(pipe, supervisor, tmp_path / "tidemark-worker")
        first = start_container(pipe, supervisor, supervisor_pod, "supervisor")
        milestone = Milestone()
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=3000, chunk=100, pause_s=1.0,
                             until=milestone).start()
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= 3, 400, "3 completed checkpoints")
        jobs = CoordinatorClient(pipe.coordinator_url, TOKEN).jobs()["jobs"]
        placed = {pod: run.events("worker host runs") for pod, run in hosts.items()}
        ports = {pod: int(local.addresses[str(container.http_port)]) for pod, (container, local) in pods.items()}
        listed = {pod: _listed_targets(port) for pod, port in ports.items()}

        # 1. a host pod lost and restarted by Kubernetes
        lost = "tidemark-worker-s1-1"
        killed = hosts[lost].kill_tree()
        sent_at_host_kill = len(feeder.records)
        container, local = pods[lost]
        hosts[lost] = start_container(pipe, container, local, lost)
        wait_for(lambda: len(first.events("attempt registered")) >= 2, 400, "the failed-over attempt registered")
        done = pipe.completed_checkpoints(topics.job_id)
        wait_for(lambda: pipe.completed_checkpoints(topics.job_id) >= done + 2, 400, "2 checkpoints after the pod")

        # 2. the supervisor's pod lost and restarted
        first.kill_tree()
        sent_at_supervisor_kill = len(feeder.records)
        again = start_container(pipe, supervisor, supervisor_pod, "supervisor")
        wait_for(lambda: again.events("attempt registered"), 400, "the restarted supervisor's attempt registered")
        milestone.after_two_more_checkpoints(pipe, topics.job_id)
        records = feeder.join(timeout_s=600)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        failures = first.events("worker failed")
        attempts = first.events("starting attempt") + again.events("starting attempt")
        resumed = again.events("resuming the job's last state")
        replaced = hosts["tidemark-worker-s0-0"].events("worker host runs")
        again.stop()

    job = next(j for j in jobs if j["job"] == topics.job_id)
    assert _process_hosts(placed) == {
        "tidemark-worker-s0-0": {"minute_counts.w0"}, "tidemark-worker-s0-1": {"minute_counts.w1"},
        "tidemark-worker-s1-0": {"top_urls.w0"}, "tidemark-worker-s1-1": {"top_urls.w1"}}
    assert {e["tasks"] for e in placed["tidemark-worker-s1-1"]} == {"1..1 of 2"}  # each knows its tasks
    # the port each host's process serves ("process-0")
    assert listed == {pod: [f"127.0.0.1:{port + 1}"] for pod, port in ports.items()}, listed
    # the registration, which every part reads: 3 operators (the exchange reader's too), 2 workers of 1 task each
    assert len(job["workers"]) == 3 and all([len(tasks) for tasks in workers] == [1, 1]
                                            for workers in job["workers"].values()), job["workers"]
    assert len(killed) >= 2  # the host and its worker (and its JVM, a first stage's)
    # the restarted pod says so, unless it came up after the supervisor's 15 s without a report (a busy machine)
    assert failures and failures[0]["reason"].startswith(("worker host top_urls/1 restarted",
                                                          "worker host top_urls/1 lost: no report for")), failures[:1]
    assert attempts[0]["restore"] is None and all("/chk-" in (a["restore"] or "") for a in attempts[1:]), attempts
    assert resumed, "the restarted supervisor resumed the job's last state"
    assert {e["epoch"] for e in replaced} >= {attempts[0]["epoch"], attempts[-1]["epoch"]}
    assert len(records) > sent_at_supervisor_kill > sent_at_host_kill  # input kept arriving across both
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records


def _listed_targets(port: int) -> list[str]:
    """The scrape targets a host pod lists for Prometheus's HTTP service discovery."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/targets", timeout=5) as response:
        return sorted(target for group in json.loads(response.read()) for target in group["targets"])


def _process_hosts(placed: dict[str, list[dict[str, Any]]]) -> dict[str, set[str]]:
    """The processes each host pod ran in the first attempt."""
    first_epoch = min(e["epoch"] for events in placed.values() for e in events)
    return {pod: {e["process"] for e in events if e["epoch"] == first_epoch} for pod, events in placed.items()}
