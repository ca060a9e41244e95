"""Running a job through the coordinator's API (``/api/v1/runs``) and the CLI, against the real
coordinator and checkpoint-store services on the session broker.

One deployment (token configured, local launcher) serves the module; only
``test_submit_a_job_see_it_register_then_cancel_it``, ``test_start_options_reach_the_supervisor``
and the test of a run outliving its coordinator (a deployment of its own) wait for Spark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from tidemark.examples.generator import expected_url_counts, generate, produce
from tidemark.examples.verify import read_committed, verify_url_counts
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.cluster import LocalCluster
from tidemark.local.pipeline import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKEN = "job-runs-api-test-token-4c1d8e"
URL_COUNTS = "tidemark.examples.access_log:url_counts"


@dataclass(frozen=True)
class Deployment:
    url: str
    home: Path
    bootstrap: str
    cluster: LocalCluster


def _cluster(home: Path, bootstrap: str, **env: str) -> LocalCluster:
    return LocalCluster(home, bootstrap, topic_prefix=f"t-job-runs-{uuid.uuid4().hex[:8]}",
                        env={"TIDEMARK_API_TOKEN": TOKEN, "TIDEMARK_CHECKPOINT__INTERVAL_MS": "2000", **env})


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("job-runs-api")
    with _cluster(home, kafka_bootstrap) as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=90)
        yield Deployment(cluster.services["coordinator"].url, home, kafka_bootstrap, cluster)


def call(url: str, method: str, path: str, body: Any = None, *, token: str | None = TOKEN,
         raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url + path, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            status, content = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, content = exc.code, exc.read()
    try:
        return status, json.loads(content)
    except ValueError:
        return status, content.decode(errors="replace")


def cli(url: str, *args: str, token: str | None = TOKEN) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TIDEMARK_API_TOKEN", "TIDEMARK_COORDINATOR_URL")}
    env["TIDEMARK_COORDINATOR_URL"] = url
    if token is not None:
        env["TIDEMARK_API_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "tidemark.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def job_args(kafka_bootstrap: str, name: str) -> dict[str, Any]:
    """Arguments of the single-stage example on fresh topics (the input topic is created)."""
    suffix = uuid.uuid4().hex[:8]
    args = {"job_id": f"{name}-{suffix}", "input_topic": f"t-{name}-in-{suffix}",
            "output_topic": f"t-{name}-out-{suffix}", "parallelism": 1}
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(args["input_topic"], 1)])
    return args


# ---------------------------------------------------------------------- a run, end to end


def test_submit_a_job_see_it_register_then_cancel_it(deployment: Deployment):
    args = job_args(deployment.bootstrap, "api-run")
    job = args["job_id"]
    status, run = call(deployment.url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args})
    assert status == 202, run
    assert (run["status"], run["job"], run["reference"], run["parallelism"]) == ("RUNNING", job, URL_COUNTS, 1)
    assert run["exit_code"] is None and run["started_at"] > 0 and alive(run["pid"])
    assert run["log_path"] == f"logs/runs/{run['run_id']}.log" and run["run_dir"] == f"runs/{job}-{run['pid']}"
    run_id = run["run_id"]

    # a second run of the same job id is refused while the first runs
    status, body = call(deployment.url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args})
    assert status == 409 and run_id in body["error"], body
    status, listing = call(deployment.url, "GET", "/api/v1/runs")
    assert status == 200 and [(r["run_id"], r["status"]) for r in listing["runs"]] == [(run_id, "RUNNING")]
    listed = cli(deployment.url, "jobs", "runs")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["RUN", "JOB", "STATUS", "PID", "STARTED", "REFERENCE", "LOG"]
    assert [run_id, job, "RUNNING", str(run["pid"])] == listed.stdout.splitlines()[1].split()[:4]

    # the supervisor starts the stage worker, which registers the job with the coordinator
    def registered() -> bool:
        assert call(deployment.url, "GET", f"/api/v1/runs/{run_id}")[1]["status"] == "RUNNING", \
            (deployment.home / run["log_path"]).read_text()[-3000:]
        # a job is known from its supervisor's first heartbeat; registered once its attempt's tasks are
        return any(j["job"] == job and j["workers"] for j in call(deployment.url, "GET", "/api/v1/jobs")[1]["jobs"])

    wait_for(registered, 150, "the job's registration")
    workers = children(run["pid"])
    assert workers, "the supervisor runs one worker per stage"

    cancelled = cli(deployment.url, "jobs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancel sent to run {run_id} of job {job} (pid {run['pid']})" in cancelled.stdout
    exited = wait_for(lambda: (d := call(deployment.url, "GET", f"/api/v1/runs/{run_id}")[1])["status"] == "EXITED"
                      and d, 60, "the run's exit after the cancel")
    assert exited["exit_code"] == 143 and exited["cancel_requested_at"] <= exited["ended_at"]
    assert not alive(run["pid"]) and not [pid for pid in workers if alive(pid)], "workers stopped too"
    supervisor_log = (deployment.home / run["log_path"]).read_text()
    assert '"attempt registered"' in supervisor_log and job in supervisor_log

    status, body = call(deployment.url, "DELETE", f"/api/v1/runs/{run_id}")
    assert status == 409 and "already exited with code 143" in body["error"]
    shown = cli(deployment.url, "jobs", "runs", run_id)
    assert shown.returncode == 0 and f"run {run_id}: job {job} ({URL_COUNTS}) EXITED(143)" in shown.stdout
    as_json = cli(deployment.url, "jobs", "runs", "--json")
    assert as_json.returncode == 0
    assert [(r["run_id"], r["status"], r["exit_code"]) for r in json.loads(as_json.stdout)["runs"]] == \
        [(run_id, "EXITED", 143)]


# ---------------------------------------------------------------------- start options


def _run_until(url: str, run_id: str, condition: Any, timeout_s: float, what: str) -> dict[str, Any]:
    return wait_for(lambda: (d := call(url, "GET", f"/api/v1/runs/{run_id}")[1]) and condition(d) and d,
                    timeout_s, what)


def _events(home: Path, run: dict[str, Any], name: str) -> list[dict[str, Any]]:
    lines = (home / run["log_path"]).read_text(errors="replace").splitlines()
    return [e for e in (json.loads(li) for li in lines if li.startswith("{")) if e.get("event") == name]


def _cancel(url: str, run_id: str) -> dict[str, Any]:
    assert call(url, "DELETE", f"/api/v1/runs/{run_id}")[0] == 202
    return _run_until(url, run_id, lambda d: d["status"] == "EXITED", 60, "the run's exit after the cancel")


@pytest.mark.timeout(900)
def test_start_options_reach_the_supervisor(deployment: Deployment):
    """``fresh``/``force`` and the default (last state) through ``POST /runs`` start the job as
    ``tidemark jobs run`` with those options does: after a run committed output, a fresh run is
    refused (exit 3, the reason in its log), a forced fresh run starts empty, a run without
    options resumes the newest checkpoint."""
    url, home = deployment.url, deployment.home
    args = job_args(deployment.bootstrap, "api-start")
    produce(deployment.bootstrap, args["input_topic"], list(generate(200)), 1)
    status, first = call(url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args})
    assert status == 202 and (first["fresh"], first["force"]) == (False, False), first
    wait_for(lambda: read_committed(deployment.bootstrap, args["output_topic"], expect=1, timeout_s=10,
                                    settle_s=0), 300, "committed output of the first run")
    wait_for(lambda: any(j["job"] == args["job_id"] and j["counts"]["completed"] >= 1
                         for j in call(url, "GET", "/api/v1/jobs")[1]["jobs"]), 60, "a completed checkpoint")
    assert _cancel(url, first["run_id"])["exit_code"] == 143

    status, fresh = call(url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args, "fresh": True})
    assert status == 202 and (fresh["fresh"], fresh["force"]) == (True, False), fresh
    refused = _run_until(url, fresh["run_id"], lambda d: d["status"] == "EXITED", 120, "the refused run's exit")
    assert refused["exit_code"] == 3
    log = (home / fresh["log_path"]).read_text()
    assert "tidemark jobs run: --fresh would write results again" in log and args["output_topic"] in log
    assert "started with empty state (fresh)" in cli(url, "jobs", "runs", fresh["run_id"]).stdout

    status, resumed = call(url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args})
    assert status == 202, resumed
    started = wait_for(lambda: _events(home, resumed, "starting attempt"), 120, "the resumed run's attempt")
    assert _events(home, resumed, "resuming the job's last state") and "/chk-" in started[0]["restore"]
    assert _cancel(url, resumed["run_id"])["exit_code"] == 143

    forced = cli(url, "jobs", "submit", URL_COUNTS, "--job-args", json.dumps(args), "--fresh", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    forced_run = json.loads(forced.stdout)
    assert (forced_run["fresh"], forced_run["force"], forced_run["status"]) == (True, True, "RUNNING")
    started = wait_for(lambda: _events(home, forced_run, "starting attempt"), 120, "the forced run's attempt")
    assert started[0]["restore"] is None  # empty state, over the committed output
    assert _cancel(url, forced_run["run_id"])["exit_code"] == 143


# ---------------------------------------------------------------------- refusals


def test_run_requests_are_refused_with_clear_status(deployment: Deployment):
    url = deployment.url
    for method, path in (("GET", "/runs"), ("POST", "/runs"), ("GET", "/runs/abc"), ("DELETE", "/runs/abc")):
        status, body = call(url, method, "/api/v1" + path, {"job": URL_COUNTS}, token=None)
        assert status == 401 and "missing bearer token" in body["error"], (method, path, body)
    status, body = call(url, "POST", "/api/v1/runs", {"job": URL_COUNTS}, token="a-wrong-token-0123456789")
    assert status == 401 and body["error"] == "invalid bearer token"

    status, body = call(url, "POST", "/api/v1/runs", {"job": "os:system", "args": {"command": "true"}})
    assert status == 403 and "not in this coordinator's job catalog (TIDEMARK_JOBS__CATALOG)" in body["error"]
    assert URL_COUNTS in body["error"]

    cases = [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "must be a JSON object"),
        (b'["job"]', 400, "must be a JSON object"),
        (b'{"args": {}}', 400, "job must be a job reference"),
        (b'{"job": 7}', 400, "job must be a job reference"),
        (b'{"job": "%s", "when": "now"}' % URL_COUNTS.encode(), 400, "unknown field(s): when"),
        (b'{"job": "%s", "args": [1]}' % URL_COUNTS.encode(), 400, "args must be a JSON object"),
        (b'{"job": "%s", "parallelism": 0}' % URL_COUNTS.encode(), 400, "parallelism must be"),
        (b'{"job": "%s", "parallelism": true}' % URL_COUNTS.encode(), 400, "parallelism must be"),
        (b'{"job": "%s", "from_checkpoint": "3"}' % URL_COUNTS.encode(), 400, "from_checkpoint must be an integer"),
        (b'{"job": "%s", "from_checkpoint": 3, "from_savepoint": "x/sp"}' % URL_COUNTS.encode(), 400,
         "at most one of from_checkpoint and from_savepoint"),
        (b'{"job": "%s", "from_savepoint": "../../etc"}' % URL_COUNTS.encode(), 400, "from_savepoint must not"),
        (b'{"job": "%s", "from_savepoint": "/etc/passwd"}' % URL_COUNTS.encode(), 400, "from_savepoint must be relative"),
        (b'{"job": "%s", "fresh": "true"}' % URL_COUNTS.encode(), 400, "fresh must be true or false"),
        (b'{"job": "%s", "force": 1}' % URL_COUNTS.encode(), 400, "force must be true or false"),
        (b'{"job": "%s", "fresh": true, "from_checkpoint": 3}' % URL_COUNTS.encode(), 400,
         "fresh starts with empty state; it cannot be combined with from_checkpoint or from_savepoint"),
        (b'{"job": "%s", "fresh": true, "from_savepoint": "x/sp"}' % URL_COUNTS.encode(), 400,
         "fresh starts with empty state; it cannot be combined"),
        (b'{"job": "%s", "args": {"colour": "red"}}' % URL_COUNTS.encode(), 422, "has no argument 'colour'"),
        (b'{"job": "%s", "args": {"mode": "SOMETIMES"}}' % URL_COUNTS.encode(), 422, "'SOMETIMES' is not a valid"),
        (b'{"job": "%s", "args": {"job_id": "../up"}}' % URL_COUNTS.encode(), 422, "unusable job id"),
        (b'{"job": "%s", "parallelism": 999}' % URL_COUNTS.encode(), 422, "above the job's max parallelism 128"),
        (b'{"job": "%s", "from_checkpoint": 3}' % URL_COUNTS.encode(), 404, "no retained checkpoint or savepoint 3"),
        (b'{"job": "%s", "from_savepoint": "nowhere/sp-1"}' % URL_COUNTS.encode(), 404, "nowhere/sp-1/_metadata"),
    ]
    for raw, expected, fragment in cases:
        status, body = call(url, "POST", "/api/v1/runs", raw=raw)
        assert (status, body["status"]) == (expected, expected) and fragment in body["error"], (raw, body)
    for method in ("GET", "DELETE"):
        status, body = call(url, method, "/api/v1/runs/0123abcd")
        assert status == 404 and body["error"] == "unknown run '0123abcd'"
        status, body = call(url, method, "/api/v1/runs/not%20a%20run")
        assert status == 400 and "not a run id" in body["error"]

    refused = cli(url, "jobs", "submit", "os:system")
    assert refused.returncode == 1 and "HTTP 403: job 'os:system' is not in this coordinator's job catalog" in refused.stderr
    bad_args = cli(url, "jobs", "submit", URL_COUNTS, "--job-args", "[1, 2]")
    assert bad_args.returncode == 2 and "expected a JSON object" in bad_args.stderr
    both = cli(url, "jobs", "submit", URL_COUNTS, "--from-checkpoint", "1", "--from-savepoint", "a/b")
    assert both.returncode == 2 and "at most one of --from-checkpoint and --from-savepoint" in both.stderr
    fresh_from = cli(url, "jobs", "submit", URL_COUNTS, "--fresh", "--from-checkpoint", "1")
    assert fresh_from.returncode == 2 and "--fresh starts with empty state" in fresh_from.stderr
    unknown = cli(url, "jobs", "cancel", "0123abcd")
    assert unknown.returncode == 1 and "HTTP 404: unknown run '0123abcd'" in unknown.stderr


def test_without_a_launcher_runs_answer_501(kafka_bootstrap: str, tmp_path: Path):
    with _cluster(tmp_path, kafka_bootstrap, TIDEMARK_JOBS__LAUNCHER="none") as cluster:
        cluster.start(["coordinator"])
        cluster.wait_ready(timeout_s=90)
        url = cluster.services["coordinator"].url
        for method, path, body in (("POST", "/runs", {"job": URL_COUNTS}), ("POST", "/runs", {"bogus": 1}),
                                   ("GET", "/runs", None), ("GET", "/runs/abc", None), ("DELETE", "/runs/abc", None)):
            status, answer = call(url, method, "/api/v1" + path, body)
            assert status == 501 and "TIDEMARK_JOBS__LAUNCHER=none" in answer["error"], (method, path, answer)
            assert "Helm chart" in answer["error"]
        assert call(url, "GET", "/api/v1/runs", token=None)[0] == 401, "authentication comes first"
        assert call(url, "GET", "/api/v1/jobs")[0] == 200, "the rest of the API is unaffected"
        submitted = cli(url, "jobs", "submit", URL_COUNTS)
        assert submitted.returncode == 1 and "HTTP 501" in submitted.stderr


@pytest.mark.parametrize(("env", "fragment"), [
    ({"TIDEMARK_JOBS__LAUNCHER": "kubernetes"}, "TIDEMARK_JOBS__LAUNCHER: Input should be 'local' or 'none'"),
    ({"TIDEMARK_JOBS__CATALOG": "tidemark.examples.access_log:url_counts,no_such_module:job"},
     "TIDEMARK_JOBS__CATALOG: Value error, no_such_module:job: cannot import 'no_such_module'"),
    ({"TIDEMARK_JOBS__CATALOG": "just-a-name"}, "TIDEMARK_JOBS__CATALOG: Value error, 'just-a-name' is not a job reference"),
    ({"TIDEMARK_HTTP_PORT": "0"}, "TIDEMARK_HTTP_PORT=0 (a random port) cannot be used with TIDEMARK_JOBS__LAUNCHER=local"),
])
def test_misconfigured_jobs_settings_stop_the_coordinator_at_start(env: dict[str, str], fragment: str,
                                                                    kafka_bootstrap: str, tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "run", "coordinator"],
                            env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
                                 "TIDEMARK_HOME": str(tmp_path), **env},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 78, result.stderr[-2000:]
    assert fragment in result.stderr


# ---------------------------------------------------------------------- runs outlive the coordinator


def _job(url: str, job: str) -> dict[str, Any] | None:
    status, body = call(url, "GET", "/api/v1/jobs")
    return next((j for j in body["jobs"] if j["job"] == job), None) if status == 200 else None


@pytest.mark.timeout(600)
def test_a_run_outlives_the_coordinator_and_a_dead_one_is_not_reported_running(kafka_bootstrap: str,
                                                                                tmp_path: Path):
    """SIGKILL, then SIGTERM, of the coordinator leave a run running; each restarted coordinator
    lists it again (re-adopted) and reports its job RUNNING from the supervisor's heartbeats, and
    the job completes its output exactly once. Then the supervisor and its workers are SIGKILLed:
    within seconds the job is FAILED with the silence as reason, and the run EXITED."""
    with _cluster(tmp_path, kafka_bootstrap, TIDEMARK_SUPERVISOR_SILENCE_MS="4000") as cluster:
        cluster.start(["coordinator", "checkpoint-store"])
        cluster.wait_ready(timeout_s=90)
        url, port = cluster.services["coordinator"].url, cluster.services["coordinator"].port
        wait_for(lambda: call(url, "GET", "/api/v1/runs")[0] == 200, 30, "the coordinator caught up")
        args = job_args(kafka_bootstrap, "outlive")
        job, records = args["job_id"], list(generate(1200))
        produce(kafka_bootstrap, args["input_topic"], records[:600], 1)
        status, run = call(url, "POST", "/api/v1/runs", {"job": URL_COUNTS, "args": args})
        assert status == 202, run
        wait_for(lambda: (j := _job(url, job)) is not None and j["counts"]["completed"] >= 1, 300,
                 "a completed checkpoint of the run")
        workers = children(run["pid"])
        assert workers, "the supervisor runs one worker per stage"

        for sig in (signal.SIGKILL, signal.SIGTERM):
            cluster.stop_one("coordinator", sig=sig, timeout_s=30)
            assert alive(run["pid"]) and all(alive(pid) for pid in workers), f"the run survives {sig.name}"
            cluster.start_one("coordinator", port=port)
            cluster.wait_ready(timeout_s=90, names=["coordinator"])
            status, listing = wait_for(lambda: (answer := call(url, "GET", "/api/v1/runs"))[0] == 200 and answer, 30,
                                       "the restarted coordinator caught up")
            assert status == 200 and [(r["run_id"], r["status"], r["pid"], r["adopted"]) for r in listing["runs"]] \
                == [(run["run_id"], "RUNNING", run["pid"], True)], listing
            time.sleep(5)  # longer than the silence limit: the heartbeats keep the job RUNNING
            state = _job(url, job)
            assert state is not None and (state["state"], state["state_reason"]) == ("RUNNING", None), state

        produce(kafka_bootstrap, args["input_topic"], records[600:], 1)
        output = read_committed(kafka_bootstrap, args["output_topic"], expect=len(records), timeout_s=240)
        verdict = verify_url_counts(output, expected_url_counts(records))
        assert verdict.exactly_once and verdict.records == len(records), verdict.summary()

        for pid in (run["pid"], *workers):
            os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        failed = wait_for(lambda: (j := _job(url, job)) is not None and j["state"] != "RUNNING" and j, 30,
                          "the job no longer RUNNING once its processes are gone")
        assert time.monotonic() - killed < 15, "within seconds"
        assert failed["state"] == "FAILED" and failed["state_reason"].startswith("supervisor silent for "), failed
        assert "last heartbeat at " in failed["state_reason"] and failed["pending_checkpoints"] == []
        exited = call(url, "GET", f"/api/v1/runs/{run['run_id']}")[1]
        assert (exited["status"], exited["exit_code"]) == ("EXITED", None), exited
