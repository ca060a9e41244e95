"""Job runs through the API, without Kafka: the body of ``POST /runs``, run ids, the ``jobs``
settings, the environment a run gets, the launcher's process handling and the text output."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tidemark.config.settings import ConfigurationError, load_settings
from tidemark.admin import render
from tidemark.admin.request_bodies import MAX_JOB_ARGS_BYTES, BadRequest, RunBody, parse_run_id
from tidemark.services.coordinator.runs import LaunchRequest, LocalLauncher, child_env, coordinator_url, run_document
from tidemark.services.coordinator.settings import EXAMPLE_JOBS, CoordinatorSettings
from tidemark.start_request import StartRequest
from tidemark.types import CheckpointId, JobId

REF = "tidemark.examples.access_log:url_counts"


# ---------------------------------------------------------------------- body


def test_run_body_fields_and_defaults() -> None:
    assert RunBody.parse(json.dumps({"job": REF}).encode()) == RunBody(job=REF)
    assert RunBody.parse(json.dumps({"job": REF, "args": None, "parallelism": None, "from_checkpoint": None,
                                     "from_savepoint": None}).encode()) == RunBody(job=REF)
    full = RunBody.parse(json.dumps({"job": REF, "args": {"job_id": "a", "parallelism": 3}, "parallelism": 4,
                                     "from_checkpoint": 12}).encode())
    assert full == RunBody(job=REF, args={"job_id": "a", "parallelism": 3}, parallelism=4,
                           from_checkpoint=CheckpointId(12))
    assert full.metadata_path is None
    savepoint = RunBody.parse(json.dumps({"job": REF, "from_savepoint": "a/savepoints/sp-3"}).encode())
    assert savepoint.from_savepoint == "a/savepoints/sp-3"
    assert savepoint.metadata_path == "a/savepoints/sp-3/_metadata"
    exact = RunBody.parse(json.dumps({"job": REF, "from_savepoint": "a/chk-3/_metadata"}).encode())
    assert exact.metadata_path == "a/chk-3/_metadata"
    fresh = RunBody.parse(json.dumps({"job": REF, "fresh": True, "force": True}).encode())
    assert (fresh.fresh, fresh.force, fresh.from_checkpoint, fresh.from_savepoint) == (True, True, None, None)
    forced = RunBody.parse(json.dumps({"job": REF, "from_checkpoint": 4, "fresh": False, "force": True}).encode())
    assert (forced.fresh, forced.force, forced.from_checkpoint) == (False, True, 4)
    dropping = RunBody.parse(json.dumps({"job": REF, "from_savepoint": "a/sp-3", "allow_non_restored_state": True}).encode())
    assert dropping.start.allow_non_restored_state and dropping.start.command_line()[-1] == "--allow-non-restored-state"


@pytest.mark.parametrize("raw, fragment", [
    (b"", "must be a JSON object"),
    (b"{oops", "not valid JSON"),
    (b"[]", "must be a JSON object, not list"),
    (b"{}", "job must be a job reference"),
    (b'{"job": ""}', "job must be a job reference"),
    (b'{"job": ["a:b"]}', "job must be a job reference"),
    (b'{"job": "a:b", "argz": {}}', "unknown field(s): argz; allowed: allow_non_restored_state, args, force, fresh, from_checkpoint, from_savepoint, job, parallelism"),
    (b'{"job": "a:b", "args": "x=1"}', "args must be a JSON object or null"),
    (b'{"job": "a:b", "args": [1]}', "args must be a JSON object or null"),
    (b'{"job": "a:b", "parallelism": 0}', "parallelism must be null or an integer in 1..32768"),
    (b'{"job": "a:b", "parallelism": 32769}', "parallelism must be null or an integer in 1..32768"),
    (b'{"job": "a:b", "parallelism": 2.5}', "parallelism must be an integer or null"),
    (b'{"job": "a:b", "parallelism": false}', "parallelism must be an integer or null"),
    (b'{"job": "a:b", "from_checkpoint": 0}', "from_checkpoint must be >= 1"),
    (b'{"job": "a:b", "from_checkpoint": "7"}', "from_checkpoint must be an integer or null"),
    (b'{"job": "a:b", "from_savepoint": 7}', "from_savepoint must be a string or null"),
    (b'{"job": "a:b", "from_checkpoint": 1, "from_savepoint": "a/b"}', "at most one of from_checkpoint and from_savepoint"),
    (b'{"job": "a:b", "fresh": "yes"}', 'fresh must be true or false, got "yes"'),
    (b'{"job": "a:b", "fresh": null}', "fresh must be true or false, got null"),
    (b'{"job": "a:b", "force": 1}', "force must be true or false, got 1"),
    (b'{"job": "a:b", "fresh": true, "from_checkpoint": 3}', "fresh starts with empty state; it cannot be combined"),
    (b'{"job": "a:b", "fresh": true, "from_savepoint": "a/b"}', "fresh starts with empty state; it cannot be combined"),
])
def test_malformed_run_bodies_are_refused(raw: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as caught:
        RunBody.parse(raw)
    assert fragment in str(caught.value)


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "%2e%2e/x", "a//b", "a/./b", "s3://b/k", "a\\..\\b"])
def test_unsafe_savepoint_paths_are_refused(path: str) -> None:
    with pytest.raises(BadRequest, match="from_savepoint"):
        RunBody.parse(json.dumps({"job": REF, "from_savepoint": path}).encode())


def test_oversized_args_are_refused() -> None:
    big = {"pad": "x" * MAX_JOB_ARGS_BYTES}
    with pytest.raises(BadRequest, match=f"at most {MAX_JOB_ARGS_BYTES} bytes"):
        RunBody.parse(json.dumps({"job": REF, "args": big}).encode())


def test_run_ids() -> None:
    assert parse_run_id("0123abcdef") == "0123abcdef"
    for bad in ("", "ABC", "../x", "a b", "0" * 65, "xyz"):
        with pytest.raises(BadRequest, match="not a run id"):
            parse_run_id(bad)


# ---------------------------------------------------------------------- settings


def _settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> CoordinatorSettings:
    for key in [k for k in os.environ if k.startswith("TIDEMARK_") or k == "KAFKA_BOOTSTRAP_SERVERS"]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return load_settings(CoordinatorSettings)


def test_jobs_settings_defaults_and_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(monkeypatch)
    assert (settings.jobs.launcher, settings.jobs.catalog) == ("local", EXAMPLE_JOBS)
    assert _settings(monkeypatch, TIDEMARK_JOBS__CATALOG=f" {REF} , {REF},").jobs.catalog == (REF,)
    assert _settings(monkeypatch, TIDEMARK_JOBS__CATALOG=json.dumps([REF])).jobs.catalog == (REF,)
    off = _settings(monkeypatch, TIDEMARK_JOBS__LAUNCHER="none", TIDEMARK_JOBS__CATALOG="not.imported:job",
                    TIDEMARK_HTTP_PORT="0")
    assert (off.jobs.launcher, off.jobs.catalog) == ("none", ("not.imported:job",))


@pytest.mark.parametrize("env, key, fragment", [
    ({"TIDEMARK_JOBS__LAUNCHER": "docker"}, "TIDEMARK_JOBS__LAUNCHER", "'local' or 'none'"),
    ({"TIDEMARK_JOBS__CATALOG": "nocolon"}, "TIDEMARK_JOBS__CATALOG", "not a job reference"),
    ({"TIDEMARK_JOBS__CATALOG": "a:b c"}, "TIDEMARK_JOBS__CATALOG", "not a job reference"),
    ({"TIDEMARK_JOBS__CATALOG": "[oops"}, "TIDEMARK_JOBS__CATALOG", "not a JSON list"),
    ({"TIDEMARK_JOBS__CATALOG": ""}, "TIDEMARK_JOBS__CATALOG", "is empty"),
    ({"TIDEMARK_JOBS__CATALOG": "no_such_module_xyz:job"}, "TIDEMARK_JOBS__CATALOG", "cannot import"),
    ({"TIDEMARK_JOBS__CATALOG": "tidemark.examples.access_log:nope"}, "TIDEMARK_JOBS__CATALOG", "has no attribute"),
    ({"TIDEMARK_JOBS__EXTRA": "1"}, "TIDEMARK_JOBS__EXTRA", "not a Tidemark setting"),
    ({"TIDEMARK_HTTP_PORT": "0"}, "<settings>", "TIDEMARK_HTTP_PORT=0"),
])
def test_misconfigured_jobs_settings_name_the_key(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                  key: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _settings(monkeypatch, **env)
    assert any(k == key and fragment in reason for k, reason in caught.value.problems), caught.value.problems


# ---------------------------------------------------------------------- environment of a run


def test_a_run_gets_the_coordinators_resolved_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = _settings(monkeypatch, TIDEMARK_HOME=str(tmp_path), TIDEMARK_HTTP_PORT="9555",
                         TIDEMARK_TOPIC_PREFIX="prod", TIDEMARK_API_TOKEN="t" * 20,
                         TIDEMARK_KAFKA__SECURITY_PROTOCOL="SASL_SSL", TIDEMARK_KAFKA__SASL_USERNAME="svc")
    environ = {"PATH": "/usr/bin", "TIDEMARK_HTTP_PORT": "9555", "TIDEMARK_CONFIG_FILE": "/etc/tidemark.yaml",
               "TIDEMARK_CHECKPOINT__INTERVAL_MS": "100", "TIDEMARK_TICK_INTERVAL_MS": "50",
               "TIDEMARK_JOBS__LAUNCHER": "local", "tidemark_home": "/elsewhere", "TIDEMARK_FAULT": "x"}
    env = child_env(settings, "broker:9092", environ)
    assert env["PATH"] == "/usr/bin"
    assert env["KAFKA_BOOTSTRAP_SERVERS"] == "broker:9092"
    assert env["TIDEMARK_COORDINATOR_URL"] == "http://127.0.0.1:9555"
    assert env["TIDEMARK_HOME"] == str(tmp_path.resolve())
    assert env["TIDEMARK_CHECKPOINT_STORAGE_URL"] == (tmp_path / "checkpoints").resolve().as_uri()
    assert (env["TIDEMARK_TOPIC_PREFIX"], env["TIDEMARK_API_TOKEN"]) == ("prod", "t" * 20)
    assert (env["TIDEMARK_KAFKA__SECURITY_PROTOCOL"], env["TIDEMARK_KAFKA__SASL_USERNAME"]) == ("SASL_SSL", "svc")
    assert "TIDEMARK_KAFKA__SASL_PASSWORD" not in env
    for gone in ("TIDEMARK_HTTP_PORT", "TIDEMARK_CONFIG_FILE", "TIDEMARK_CHECKPOINT__INTERVAL_MS",
                 "TIDEMARK_TICK_INTERVAL_MS", "TIDEMARK_JOBS__LAUNCHER", "tidemark_home", "TIDEMARK_FAULT"):
        assert gone not in env, gone


@pytest.mark.parametrize("host, url", [("127.0.0.1", "http://127.0.0.1:9400"), ("0.0.0.0", "http://127.0.0.1:9400"),
                                       ("::", "http://[::1]:9400"), ("coordinator", "http://coordinator:9400")])
def test_coordinator_url(monkeypatch: pytest.MonkeyPatch, host: str, url: str) -> None:
    assert coordinator_url(_settings(monkeypatch, TIDEMARK_HTTP_HOST=host)) == url


# ---------------------------------------------------------------------- launcher


class SleepingLauncher(LocalLauncher):
    """Runs a Python sleeper instead of ``tidemark jobs run`` (the process handling is the same)."""

    def command(self, request: LaunchRequest) -> list[str]:
        assert super().command(request)[3:6] == ["jobs", "run", request.reference]
        return [sys.executable, "-c", "import sys, time; print(sys.argv, flush=True); time.sleep(60)", request.job_id]


def _wait(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_launcher_starts_and_cancels_runs_in_their_own_session(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings = _settings(monkeypatch, TIDEMARK_HOME=str(tmp_path), TIDEMARK_SHUTDOWN_TIMEOUT_S="4")
    launcher = SleepingLauncher(settings, "127.0.0.1:9092", environ={})
    first = launcher.start(LaunchRequest(REF, {"job_id": "a"}, JobId("a"), 2))
    second = launcher.start(LaunchRequest(REF, {}, JobId("b"), 1, StartRequest(from_savepoint="b/savepoints/sp-1")))
    assert launcher.running_for(JobId("a")) is first and launcher.running_for(JobId("c")) is None
    document = run_document(first)
    assert (document["status"], document["exit_code"], document["job"], document["pid"], document["adopted"]) == \
        ("RUNNING", None, "a", first.pid, False)
    assert document["log_path"] == f"logs/runs/{first.run_id}.log"
    assert os.getsid(first.pid) == first.pid, "a run leads a session of its own: it outlives the coordinator"

    launcher.cancel(first)
    _wait(lambda: not launcher.get(first.run_id).running, "the cancelled run's exit")
    assert first.exit_code == 128 + signal.SIGTERM and first.ended_at >= first.cancel_requested_at
    assert run_document(first)["status"] == "EXITED" and launcher.running_for(JobId("a")) is None
    recorded = json.loads((tmp_path / "job-runs" / f"{first.run_id}.json").read_text())
    assert (recorded["status"], recorded["exit_code"]) == ("EXITED", 143)
    launcher.cancel(second)
    _wait(lambda: not launcher.get(second.run_id).running, "the second run's exit")


def test_a_restarted_coordinator_re_adopts_its_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The run records in the home: a new launcher (the coordinator restarted) lists every run,
    re-adopts the running one by pid and start time, cancels it, and sees it exit (code unknown:
    not its child); a record whose pid now names another process is not taken for the run."""
    settings = _settings(monkeypatch, TIDEMARK_HOME=str(tmp_path))
    before = SleepingLauncher(settings, "127.0.0.1:9092", environ={})
    done = before.start(LaunchRequest(REF, {}, JobId("done"), 1))
    before.cancel(done)
    _wait(lambda: not before.get(done.run_id).running, "the first run's exit")
    alive = before.start(LaunchRequest(REF, {"job_id": "b"}, JobId("b"), 3, StartRequest(7, force=True)))
    _wait(lambda: "'b'" in (tmp_path / alive.log_path).read_text(), "the sleeper's first line")

    recycled = json.loads((tmp_path / "job-runs" / f"{alive.run_id}.json").read_text())
    recycled.update(run_id="f" * 32, pid=os.getpid(), pid_started=1, started_at=alive.started_at + 1)
    (tmp_path / "job-runs" / f"{'f' * 32}.json").write_text(json.dumps(recycled))
    (tmp_path / "job-runs" / f"{'e' * 32}.json").write_text("{not json")

    after = SleepingLauncher(settings, "127.0.0.1:9092", environ={})
    listed = [run_document(r) for r in after.list()]
    assert [(d["run_id"], d["status"], d["exit_code"], d["adopted"]) for d in listed] == [
        (done.run_id, "EXITED", 143, True), (alive.run_id, "RUNNING", None, True), ("f" * 32, "EXITED", None, True)]
    adopted = after.running_for(JobId("b"))
    assert adopted is not None and adopted.pid == alive.pid and adopted.request == alive.request
    after.cancel(adopted)
    _wait(lambda: (alive.process.poll() is not None) and not after.get(alive.run_id).running,
          "the adopted run's exit after its cancel")
    assert adopted.exit_code is None and adopted.ended_at >= adopted.cancel_requested_at
    assert alive.process.returncode == -signal.SIGTERM
    assert render.run_status(run_document(adopted)) == "EXITED(unknown)"
    assert json.loads((tmp_path / "job-runs" / f"{alive.run_id}.json").read_text())["status"] == "EXITED"


def test_launch_command() -> None:
    launcher = LocalLauncher.__new__(LocalLauncher)
    command = launcher.command(LaunchRequest(REF, {"job_id": "a"}, JobId("a"), 3, StartRequest(7)))
    assert command[1:] == ["-m", "tidemark.cli", "jobs", "run", REF, "--job-args", '{"job_id": "a"}',
                           "--parallelism", "3", "--from-checkpoint", "7"]
    command = launcher.command(LaunchRequest(REF, {}, JobId("a"), 1, StartRequest(from_savepoint="a/savepoints/sp-2")))
    assert command[-2:] == ["--from-savepoint", "a/savepoints/sp-2"]
    command = launcher.command(LaunchRequest(REF, {}, JobId("a"), 1, StartRequest(fresh=True, force=True)))
    assert command[-2:] == ["--fresh", "--force"] and "--from-checkpoint" not in command
    command = launcher.command(LaunchRequest(REF, {}, JobId("a"), 1, StartRequest(3, force=True)))
    assert command[-3:] == ["--from-checkpoint", "3", "--force"]


# ---------------------------------------------------------------------- text


def _doc(**changes: object) -> dict[str, object]:
    base = {"run_id": "abc123", "reference": REF, "job": "counts", "args": {}, "parallelism": 2,
            "from_checkpoint": None, "from_savepoint": None, "fresh": False, "force": False,
            "allow_non_restored_state": False, "pid": 4242, "status": "RUNNING",
            "adopted": False, "exit_code": None,
            "started_at": 1_700_000_000_000, "ended_at": None, "cancel_requested_at": None,
            "log_path": "logs/runs/abc123.log", "run_dir": "runs/counts-4242"}
    return {**base, **changes}


def test_run_text() -> None:
    text = render.run_text(_doc(from_checkpoint=5))
    assert text.splitlines()[0] == f"run abc123: job counts ({REF}) RUNNING"
    assert "pid 4242, parallelism 2, started 2023-11-14 22:13:20.000Z" in text
    assert "restored from checkpoint 5" in text and "log logs/runs/abc123.log" in text
    assert "empty state" not in text and "forced" not in text
    fresh = render.run_text(_doc(fresh=True, force=True))
    assert "started with empty state (fresh)" in fresh and "forced (over committed output or newer state)" in fresh
    assert render.run_text(_doc(status="EXITED", exit_code=143, ended_at=1_700_000_001_000,
                                cancel_requested_at=1)).splitlines()[0].endswith("EXITED(143)")
    table = render.runs_text({"runs": [_doc(), _doc(run_id="def456", cancel_requested_at=1)]}).splitlines()
    assert table[0].split() == ["RUN", "JOB", "STATUS", "PID", "STARTED", "REFERENCE", "LOG"]
    assert table[1].split()[:3] == ["abc123", "counts", "RUNNING"]
    assert table[2].split()[:3] == ["def456", "counts", "RUNNING(cancelling)"]
