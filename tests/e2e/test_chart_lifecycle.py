"""The chart's savepoint-driven lifecycle, run as the chart renders it (``chart_pods``), release
revision by revision: the pre-upgrade hook's exact command against a running job, for a suspend
(``job.state=suspended``) and for upgrades in ``job.upgradeMode=savepoint``, each followed by the
worker container the next revision runs; the read_committed output must then be exact, record by
record.

1. revision 1 (last state) starts the job; input arrives throughout;
2. revision 2, suspend: the hook stops the job with a savepoint for generation 2 (exit 0,
   COMPLETED); the job is SUSPENDED with that savepoint as its ``last_savepoint``; the old
   worker does not exit (its container would restart and resume the job) but waits until the
   scale to zero stops it (exit 0); revision 3, still suspended: the hook takes no savepoint;
3. revision 4, resumed in savepoint mode: the worker (``--generation 4``) resumes that savepoint;
4. revision 5, an upgrade: the hook stops the job for generation 5; the revision-4 worker waits to
   be replaced, and its container started again (a restart before the upgrade replaced its pod)
   waits too instead of resuming the job; the revision-5 worker resumes the hook's savepoint.
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
from tidemark.runtime.supervisor.suspension import WAITING

pytestmark = pytest.mark.timeout(900)


def chart_values(pipe: LocalPipeline, topics: Topics, idle: Path, **job: str) -> dict[str, Any]:
    extra = [*QUICK_START_EXTRA_ENV, {"name": "TIDEMARK_IDLE_WORKERS__DIR", "value": str(idle)}]
    return {"topicPrefix": pipe.cluster.topic_prefix, "kafka": {"replicationFactor": 1},
            "checkpointStorage": {"filesystem": {"accessModes": ["ReadWriteMany"]}},
            "worker": {"job": TOP_URLS, "jobArgs": topics.args(), "stages": 2, "extraEnv": extra},
            "job": {"id": topics.job_id, **job}}


def rendered(values: dict[str, Any], template: str, revision: int) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART_DIR) as chart:
        sources = chart.render(values, name="tidemark", namespace="tidemark", revision=revision,
                               is_install=revision == 1, is_upgrade=revision > 1)
    source = next(text for name, text in sources.items() if name.endswith(f"templates/{template}"))
    return [d for d in yaml.safe_load_all(source) if d]


def render_hook(values: dict[str, Any], revision: int) -> RenderedContainer:
    """The pre-upgrade hook Job's container, as the chart renders it for an upgrade to ``revision``."""
    (doc,) = rendered(values, "savepoint-hook.yaml", revision)
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
                       job_id: str, generation: int) -> str:
    """Run the hook against the running job; its savepoint's ``_metadata`` path. The worker it
    stopped waits to be replaced (it would resume the job if it exited and restarted) until the
    upgrade replaces its pod: SIGTERM, exit 0."""
    wait_for(lambda: pipe.completed_checkpoints(job_id) >= 2, 300, "2 completed checkpoints")
    stopped = run_hook(pipe, hook, root)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stop-with-savepoint request" in stopped.stdout and ": COMPLETED, id " in stopped.stdout, stopped.stdout
    path = stopped.stdout.strip().rsplit("metadata ", 1)[1]
    document = job_document(pipe, hook, root, job_id)
    assert (document["state"], document["suspended_generation"]) == ("SUSPENDED", generation), document
    assert document["last_savepoint"]["metadata_path"] == path
    held(worker)
    assert worker.stop() == 0  # the pod replaced (or scaled to zero)
    return path


def held(worker: JobRun) -> None:
    """The worker waits to be replaced (and stays alive meanwhile), resuming nothing."""
    wait_for(lambda: worker.events(WAITING), 120, "the supervisor waiting to be replaced")
    assert worker.process.poll() is None


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
        suspend = chart_values(pipe, topics, idle, state="suspended")
        savepoint_mode = chart_values(pipe, topics, idle, upgradeMode="savepoint")
        (suspended_worker,) = [d for d in rendered(suspend, "worker.yaml", 2) if d["kind"] == "Deployment"]
        assert suspended_worker["spec"]["replicas"] == 0  # a suspended release has no worker pod
        hook_args = ["savepoint", "trigger", topics.job_id, "--stop", "--wait", "--if-running", "--timeout", "600"]
        assert render_hook(suspend, 2).args == hook_args + ["--generation", "2"]
        assert render_hook(savepoint_mode, 5).args == hook_args + ["--generation", "5"]
        worker_at = {1: render_workers(chart_values(pipe, topics, idle))["tidemark-worker"],
                     4: render_workers(savepoint_mode, 4)["tidemark-worker"],
                     5: render_workers(savepoint_mode, 5)["tidemark-worker"]}
        assert worker_at[4].args == worker_at[1].args + ["--generation", "4"]  # resumes the newest state

        milestone = Milestone()
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=1500, chunk=100, pause_s=0.5, until=milestone).start()
        first = start_container(pipe, worker_at[1], local_pod(pipe, worker_at[1], tmp_path / "pod-1"))
        suspended = stop_with_the_hook(pipe, render_hook(suspend, 2), tmp_path / "hook-2", first, topics.job_id, 2)
        for revision, values in ((3, suspend), (4, savepoint_mode)):  # upgrades while suspended, then resumed
            again = run_hook(pipe, render_hook(values, revision), tmp_path / f"hook-{revision}")
            assert again.returncode == 0, again.stderr
            assert again.stdout.strip() == (f"job {topics.job_id} is SUSPENDED: no savepoint taken; its last "
                                            f"savepoint: {suspended}")

        resumed = start_container(pipe, worker_at[4], local_pod(pipe, worker_at[4], tmp_path / "pod-4"))
        assert suspended.removesuffix("/_metadata") in resumed_from(resumed, pipe, topics.job_id)
        upgraded_from = stop_with_the_hook(pipe, render_hook(savepoint_mode, 5), tmp_path / "hook-5", resumed,
                                           topics.job_id, 5)
        assert upgraded_from != suspended
        restarted = start_container(pipe, worker_at[4], local_pod(pipe, worker_at[4], tmp_path / "pod-4"))
        held(restarted)  # revision 4's container restarted before its pod was replaced: resumes nothing
        assert restarted.events("starting attempt") == [] and restarted.stop() == 143

        upgraded = start_container(pipe, worker_at[5], local_pod(pipe, worker_at[5], tmp_path / "pod-5"))
        assert upgraded_from.removesuffix("/_metadata") in resumed_from(upgraded, pipe, topics.job_id)
        milestone.after_two_more_checkpoints(pipe, topics.job_id)
        records = feeder.join(timeout_s=600)
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        upgraded.stop()
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records
