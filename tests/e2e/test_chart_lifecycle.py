"""The chart's savepoint-driven lifecycle, run as the chart renders it (``chart_pods``): the
pre-upgrade hook's exact command against a running job, for a suspend (``job.state=suspended``)
and for an upgrade in ``job.upgradeMode=savepoint``, each followed by the worker container the
next release runs; the read_committed output must then be exact, record by record.

1. the worker of a running release starts; input arrives throughout;
2. suspend: the hook stops the job with a savepoint (exit 0, COMPLETED), the supervisor exits 0,
   the job is FINISHED with that savepoint as its ``last_savepoint``; the suspended release has
   no worker pods, and the hook run again (a later upgrade while suspended) takes none;
3. resume (``job.state=running``): the same worker container resumes that savepoint;
4. upgrade in savepoint mode: the same hook command stops it with a new savepoint, and the
   upgraded worker container resumes that one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from chart_pods import (CHART_DIR, QUICK_START_EXTRA_ENV, TOKEN, LocalPod, RenderedContainer, local_pod,
                        render_workers, start_container)
from pipeline_support import TOP_URLS, Milestone, Topics, pipeline, topics_for, verify_two_stage
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, wait_for

pytestmark = pytest.mark.timeout(900)


def chart_values(pipe: LocalPipeline, topics: Topics, idle: Path, **job: str) -> dict[str, Any]:
    extra = [*QUICK_START_EXTRA_ENV, {"name": "TIDEMARK_IDLE_WORKERS__DIR", "value": str(idle)}]
    return {"topicPrefix": pipe.cluster.topic_prefix, "kafka": {"replicationFactor": 1},
            "checkpointStorage": {"filesystem": {"accessModes": ["ReadWriteMany"]}},
            "worker": {"job": TOP_URLS, "jobArgs": topics.args(), "stages": 2, "extraEnv": extra},
            "job": {"id": topics.job_id, **job}}


def rendered(values: dict[str, Any], template: str) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART_DIR) as chart:
        sources = chart.render(values, name="tidemark", namespace="tidemark", is_install=True)
    source = next(text for name, text in sources.items() if name.endswith(f"templates/{template}"))
    return [d for d in yaml.safe_load_all(source) if d]


def render_hook(values: dict[str, Any]) -> RenderedContainer:
    """The pre-upgrade hook Job's container, as the chart renders it."""
    (doc,) = rendered(values, "savepoint-hook.yaml")
    assert doc["kind"] == "Job" and doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return RenderedContainer(doc["metadata"]["name"], container.get("command"), container["args"],
                             {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]},
                             [m["mountPath"] for m in container["volumeMounts"]], 0, 0)


def run_hook(pipe: LocalPipeline, hook: RenderedContainer, root: Path) -> subprocess.CompletedProcess:
    """The hook's container: the image's entrypoint with the rendered arguments and environment."""
    assert hook.command is None and hook.mounts == ["/tmp"]
    (root / "tmp").mkdir(parents=True, exist_ok=True)
    pod = LocalPod({"/tmp": root / "tmp"}, {"http://tidemark-coordinator:9400": pipe.coordinator_url},
                   {("tidemark-api-token", "api-token"): TOKEN}, {})
    entrypoint = str(Path(sys.executable).with_name("tidemark"))
    return subprocess.run([entrypoint, *hook.args], env=pod.env(hook), capture_output=True, text=True, timeout=900)


def job_document(pipe: LocalPipeline, hook: RenderedContainer, root: Path, job_id: str) -> dict[str, Any]:
    listed = run_hook(pipe, RenderedContainer(hook.workload, None, ["jobs", "list", "--json"], hook.env,
                                              hook.mounts, 0, 0), root)
    assert listed.returncode == 0, listed.stderr
    return next(j for j in json.loads(listed.stdout)["jobs"] if j["job"] == job_id)


def stop_with_the_hook(pipe: LocalPipeline, hook: RenderedContainer, root: Path, worker: JobRun,
                       job_id: str) -> str:
    """Run the hook against the running job; its savepoint's ``_metadata`` path."""
    wait_for(lambda: pipe.completed_checkpoints(job_id) >= 2, 300, "2 completed checkpoints")
    stopped = run_hook(pipe, hook, root)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stop-with-savepoint request" in stopped.stdout and ": COMPLETED, id " in stopped.stdout, stopped.stdout
    path = stopped.stdout.strip().rsplit("metadata ", 1)[1]
    assert worker.wait(timeout_s=120) == 0  # the job finished: the supervisor exits 0
    document = job_document(pipe, hook, root, job_id)
    assert document["state"] == "FINISHED" and document["last_savepoint"]["metadata_path"] == path
    return path


def resumed_from(run: JobRun, pipe: LocalPipeline, job_id: str) -> str:
    done = pipe.completed_checkpoints(job_id)
    wait_for(lambda: pipe.completed_checkpoints(job_id) > done, 300, "a checkpoint after the resume")
    return run.events("starting attempt")[0]["restore"]


def test_suspend_resume_and_a_savepoint_upgrade_run_the_hooks_command_and_stay_exactly_once(
        tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    idle = tmp_path / "idle-workers"
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        running = chart_values(pipe, topics, idle)
        (suspended_worker,) = [d for d in rendered(chart_values(pipe, topics, idle, state="suspended"), "worker.yaml")
                               if d["kind"] == "Deployment"]
        assert suspended_worker["spec"]["replicas"] == 0  # a suspended release has no worker pod
        suspend_hook = render_hook(chart_values(pipe, topics, idle, state="suspended"))
        upgrade_hook = render_hook(chart_values(pipe, topics, idle, upgradeMode="savepoint"))
        assert suspend_hook.args == upgrade_hook.args == [
            "savepoint", "trigger", topics.job_id, "--stop", "--wait", "--if-running", "--timeout", "600"]
        worker = render_workers(running)["tidemark-worker"]
        assert render_workers(chart_values(pipe, topics, idle, upgradeMode="savepoint"))[
            "tidemark-worker"].args == worker.args  # the upgraded pod resumes the newest state

        milestone = Milestone()
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1500, chunk=100, pause_s=0.5, until=milestone).start()
        first = start_container(pipe, worker, local_pod(pipe, worker, tmp_path / "pod-1"))
        suspended = stop_with_the_hook(pipe, suspend_hook, tmp_path / "hook-1", first, topics.job_id)
        again = run_hook(pipe, suspend_hook, tmp_path / "hook-2")  # a later upgrade, still suspended
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == f"job {topics.job_id} is FINISHED: no savepoint taken; its last savepoint: {suspended}"

        resumed = start_container(pipe, worker, local_pod(pipe, worker, tmp_path / "pod-2"))
        assert suspended.removesuffix("/_metadata") in resumed_from(resumed, pipe, topics.job_id)
        upgraded_from = stop_with_the_hook(pipe, upgrade_hook, tmp_path / "hook-3", resumed, topics.job_id)
        assert upgraded_from != suspended

        upgraded = start_container(pipe, worker, local_pod(pipe, worker, tmp_path / "pod-3"))
        assert upgraded_from.removesuffix("/_metadata") in resumed_from(upgraded, pipe, topics.job_id)
        milestone.after_two_more_checkpoints(pipe, topics.job_id)
        records = feeder.join(timeout_s=600)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        upgraded.stop()
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
