"""Configuration and usage errors say what is wrong, in one line, with the documented exit code."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal

import pytest
from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.config.environment import NOT_SETTINGS, setting_variables, unknown_variables
from tidemark.config.service_modules import SERVICES
from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.api import JobSpec, JobSpecError, Stage, check_job_args, load_job
from tidemark.examples.access_log import CountHits
from tidemark.services import run_service, service_module
from tidemark.services.coordinator.settings import CoordinatorSettings
from tidemark.services.materializer.settings import MaterializerSettings

SRC = Path(__file__).resolve().parents[3] / "src" / "tidemark"
TOP_URLS = "tidemark.examples.access_log:top_urls"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("TIDEMARK_") or name in ("KAFKA_BOOTSTRAP_SERVERS", "BOOTSTRAP_SERVERS"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize("settings_cls", [TidemarkSettings, CoordinatorSettings, MaterializerSettings])
def test_a_misspelled_top_level_key_is_refused_with_the_closest_key(monkeypatch, settings_cls) -> None:
    monkeypatch.setenv("TIDEMARK_CHEKPOINT__INTERVAL_MS", "5000")
    with pytest.raises(ConfigurationError) as raised:
        load_settings(settings_cls)
    assert raised.value.problems == [("TIDEMARK_CHEKPOINT__INTERVAL_MS",
                                      "not a Tidemark setting; did you mean TIDEMARK_CHECKPOINT__INTERVAL_MS?")]


@pytest.mark.parametrize(("variable", "suggestion"), [
    ("TIDEMARK_RETAINED_CHECKPOINT", "TIDEMARK_RETAINED_CHECKPOINTS"),
    ("TIDEMARK_KAFKA__SASL_USER", "TIDEMARK_KAFKA__SASL_USERNAME"),
    ("TIDEMARK_HTTP_PROT", "TIDEMARK_HTTP_PORT"),
    ("tidemark_log_levl", "TIDEMARK_LOG_LEVEL"),  # pydantic-settings reads names in any case
])
def test_suggestions(monkeypatch, variable: str, suggestion: str) -> None:
    monkeypatch.setenv(variable, "1")
    with pytest.raises(ConfigurationError, match=re.escape(f"{variable}: not a Tidemark setting; "
                                                           f"did you mean {suggestion}?")):
        load_settings(TidemarkSettings)


def test_a_name_close_to_nothing_points_at_the_reference(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_WHATEVER", "1")
    assert unknown_variables(TidemarkSettings, {"TIDEMARK_WHATEVER": "1"}) == [
        ("TIDEMARK_WHATEVER", "not a Tidemark setting; see the configuration reference in docs/operations.md")]


def test_every_problem_is_reported_at_once() -> None:
    env = {"TIDEMARK_FOO": "1", "TIDEMARK_HTTP_PROT": "1", "TIDEMARK_HOME": "/x"}
    assert [key for key, _ in unknown_variables(TidemarkSettings, env)] == ["TIDEMARK_FOO", "TIDEMARK_HTTP_PROT"]


def test_another_process_settings_are_accepted_in_a_shared_environment(monkeypatch) -> None:
    """LocalPipeline and docker-compose give one environment to several processes."""
    monkeypatch.setenv("TIDEMARK_CHECKPOINT__INTERVAL_MS", "2000")  # the coordinator's
    monkeypatch.setenv("TIDEMARK_RETAINED_CHECKPOINTS", "5")  # the checkpoint-store's
    monkeypatch.setenv("TIDEMARK_MATERIALIZATION__INTERVAL_MS", "60000")
    assert load_settings(TidemarkSettings).topic_prefix == "tidemark"
    assert load_settings(MaterializerSettings).materialization.interval_ms == 60000


def test_variables_read_outside_the_settings_are_accepted(monkeypatch) -> None:
    for name in NOT_SETTINGS:
        monkeypatch.setenv(name, "x" if name != "TIDEMARK_CONFIG_FILE" else "")
    monkeypatch.setenv("TIDEMARK_HOME", "/tmp/x")
    monkeypatch.setenv("TIDEMARK_BROKER_ENGINE", "kafka")
    assert load_settings(TidemarkSettings).home == Path("/tmp/x")


def test_every_tidemark_variable_named_in_the_code_is_known() -> None:
    """The allow-list stays complete: a TIDEMARK_* name in src/ is a setting or in NOT_SETTINGS."""
    known = set(NOT_SETTINGS) | setting_variables(TidemarkSettings)
    for name in SERVICES:
        known |= setting_variables(service_module(name).SETTINGS)
    named = {match for path in SRC.rglob("*.py") if path.name != "environment.py"  # its docstring's typo
             for match in re.findall(r"TIDEMARK_[A-Z0-9_]*[A-Z0-9]", path.read_text())}
    prefixes = {n for n in named if any(k.startswith(n + "__") for k in known)}  # e.g. "TIDEMARK_JOBS__*"
    assert sorted(named - known - prefixes) == []


def test_a_short_api_token_is_refused_without_echoing_it(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_API_TOKEN", "hunter2-secret")
    with pytest.raises(ConfigurationError) as raised:
        load_settings(CoordinatorSettings)
    assert "hunter2" not in str(raised.value)
    assert raised.value.problems == [("TIDEMARK_API_TOKEN", "Value error, must be at least 16 characters "
                                                            "(e.g. openssl rand -hex 32)")]


def test_the_sasl_password_is_not_echoed(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA__SASL_PASSWORD", "pa55-w0rd")
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    assert "pa55" not in str(raised.value) and "TIDEMARK_KAFKA__SASL_PASSWORD" in str(raised.value)


def test_other_invalid_values_are_still_quoted(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_HTTP_PORT", "abc")
    with pytest.raises(ConfigurationError, match=re.escape("TIDEMARK_HTTP_PORT: Input should be a valid "
                                                           "integer, unable to parse string as an integer (got 'abc')")):
        load_settings(TidemarkSettings)


def test_a_service_with_bad_configuration_writes_one_line_and_exits_78(monkeypatch, capsys) -> None:
    monkeypatch.setenv("TIDEMARK_API_TOKEN", "hunter2-secret")
    monkeypatch.setenv("TIDEMARK_CHEKPOINT__INTERVAL_MS", "1")
    with pytest.raises(SystemExit) as exited:
        run_service("coordinator")
    assert exited.value.code == 78
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "tidemark coordinator: invalid configuration: TIDEMARK_CHEKPOINT__INTERVAL_MS: not a Tidemark setting; "
        "did you mean TIDEMARK_CHECKPOINT__INTERVAL_MS?"]
    monkeypatch.delenv("TIDEMARK_CHEKPOINT__INTERVAL_MS")
    with pytest.raises(SystemExit):
        run_service("coordinator")
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "TIDEMARK_API_TOKEN" in err and "hunter2" not in err


# ---------------------------------------------------------------------- --job-args


@pytest.mark.parametrize(("args", "message"), [
    ({"parallelism": "two"}, f"{TOP_URLS}: argument 'parallelism' must be an integer, got \"two\""),
    ({"parallelism": True}, f"{TOP_URLS}: argument 'parallelism' must be an integer, got true"),
    ({"changelog": "yes"}, f"{TOP_URLS}: argument 'changelog' must be true or false, got \"yes\""),
    ({"job_id": 7}, f"{TOP_URLS}: argument 'job_id' must be a string, got 7"),
    ({"paralelism": 2}, f"{TOP_URLS} has no argument 'paralelism'; did you mean 'parallelism'? (arguments: "
                        "job_id, input_topic, channel_topic, output_topic, parallelism, mode, state_backend, "
                        "changelog, top_urls_batch_records, on_error, fail_on_url, workers, top_urls_workers, "
                        "max_out_of_orderness_ms, idle_timeout_ms, late_records, late_output, co_partitioned, "
                        "spark_step)"),
])
def test_job_args_are_checked_against_the_signature(args, message) -> None:
    with pytest.raises(JobSpecError) as raised:
        load_job(TOP_URLS, args)
    assert str(raised.value) == message


def job(name: str, mode: Literal["a", "b"] = "a", limit: int | None = None, ratio: float = 1.0) -> None:
    raise AssertionError("not called")


def test_union_literal_and_required_arguments() -> None:
    check_job_args("m:job", job, {"name": "x", "mode": "b", "limit": None, "ratio": 2})
    with pytest.raises(JobSpecError, match=r"m:job: argument 'mode' must be \"a\" or \"b\", got \"c\""):
        check_job_args("m:job", job, {"name": "x", "mode": "c"})
    with pytest.raises(JobSpecError, match=r"argument 'limit' must be an integer or null, got 1.5"):
        check_job_args("m:job", job, {"name": "x", "limit": 1.5})
    with pytest.raises(JobSpecError, match=r"m:job needs the argument\(s\) name in --job-args"):
        check_job_args("m:job", job, {})


def dotted_stage_job() -> JobSpec:

    return JobSpec("dotted", (Stage("counts.side.x", ("in",), str, CountHits, "out"),))


def test_a_stage_name_tidemark_could_confuse_with_its_own_suffixes_is_refused_in_one_line() -> None:
    with pytest.raises(JobSpecError, match=re.escape(f"{__name__}:dotted_stage_job: stage name 'counts.side.x' "
                                                     "must be 1-64 letters, digits, '_' or '-'")):
        load_job(f"{__name__}:dotted_stage_job")


def test_valid_job_args_load_the_job() -> None:
    spec = load_job(TOP_URLS, {"parallelism": 3, "changelog": False, "job_id": "t"})
    assert (spec.parallelism, spec.job_id) == (3, "t")


@pytest.mark.parametrize(("job_args", "line"), [
    ('{"parallelism":"two"}', f"tidemark jobs run: {TOP_URLS}: argument 'parallelism' must be an integer, "
                              "got \"two\""),
    ('{"parallelism":0}', "tidemark jobs run: parallelism must be in 1..128, got 0"),
    ("[1]", "tidemark jobs run: --job-args: expected a JSON object, got '[1]'"),
])
def test_jobs_run_reports_bad_job_args_in_one_line_with_exit_2(job_args: str, line: str) -> None:
    result = CliRunner().invoke(app, ["jobs", "run", TOP_URLS, "--job-args", job_args])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [line]
    assert "Traceback" not in result.output


def test_jobs_run_with_an_unknown_setting_exits_78(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_CHEKPOINT__INTERVAL_MS", "1")
    result = CliRunner().invoke(app, ["jobs", "run", TOP_URLS])
    assert result.exit_code == 78
    assert result.stderr.splitlines() == [
        "tidemark supervisor: invalid configuration: TIDEMARK_CHEKPOINT__INTERVAL_MS: not a Tidemark setting; "
        "did you mean TIDEMARK_CHECKPOINT__INTERVAL_MS?"]


def test_a_standby_that_finds_no_kafka_address_exits_78_in_one_line(monkeypatch, tmp_path) -> None:
    """The address is resolved only when the standby prepares its Spark source: one line, not a traceback."""
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))  # no embedded broker runs there
    result = CliRunner().invoke(app, ["jobs", "standby", "--stage", "top_urls"])
    assert result.exit_code == 78, result.output
    assert result.stderr.splitlines() == [
        "tidemark jobs standby: invalid configuration: KAFKA_BOOTSTRAP_SERVERS: unset and no embedded broker is "
        f"running under {tmp_path}/broker (start one with `tidemark broker start`)"]


def test_warm_workers_without_an_idle_workers_directory_exits_78_in_one_line(monkeypatch) -> None:
    monkeypatch.delenv("TIDEMARK_IDLE_WORKERS__DIR", raising=False)
    result = CliRunner().invoke(app, ["jobs", "warm-workers", "--count", "2"])
    assert result.exit_code == 78, result.output
    assert result.stderr.splitlines() == [
        "tidemark jobs warm-workers: idle workers are off: set idle_workers.dir (TIDEMARK_IDLE_WORKERS__DIR), "
        "the same for the jobs that are to take them"]


def test_warm_workers_beyond_the_idle_workers_kept_exits_2_in_one_line(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TIDEMARK_IDLE_WORKERS__DIR", str(tmp_path / "idle"))
    monkeypatch.setenv("TIDEMARK_IDLE_WORKERS__MAX", "2")
    result = CliRunner().invoke(app, ["jobs", "warm-workers", "--count", "3"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "tidemark jobs warm-workers: --count 3: at most idle_workers.max (2) idle workers are kept"]
    assert not (tmp_path / "idle").exists(), "a process was started"


def test_warm_workers_that_find_no_kafka_address_exit_78_in_one_line(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("TIDEMARK_HOME", str(tmp_path))  # no embedded broker runs there
    monkeypatch.setenv("TIDEMARK_IDLE_WORKERS__DIR", str(tmp_path / "idle"))
    result = CliRunner().invoke(app, ["jobs", "warm-workers"])
    assert result.exit_code == 78, result.output
    assert result.stderr.splitlines() == [
        "tidemark jobs warm-workers: invalid configuration: KAFKA_BOOTSTRAP_SERVERS: unset and no embedded broker "
        f"is running under {tmp_path}/broker (start one with `tidemark broker start`)"]


def test_extra_spark_configuration_reaches_the_worker_session_after_tidemark_s_own(monkeypatch) -> None:
    from tidemark.runtime.worker.query import session_options
    from tidemark.spark.stage_source import TidemarkKafkaSource

    monkeypatch.setenv("TIDEMARK_SPARK__CONF", '{"spark.sql.codegen.wholeStage": "false", "spark.driver.memory": "2g"}')
    options = session_options(load_settings(TidemarkSettings), "app", TidemarkKafkaSource({}))
    assert options.extra_conf == {"spark.sql.codegen.wholeStage": "false", "spark.driver.memory": "2g"}


@pytest.mark.parametrize(("value", "problem"), [
    ('{"sql.codegen.wholeStage": "false"}', "not Spark configuration keys (each starts with 'spark.'): "
                                            "['sql.codegen.wholeStage']"),
    ('["spark.driver.memory"]', "Input should be a valid dictionary"),
])
def test_extra_spark_configuration_is_checked_by_key(monkeypatch, value: str, problem: str) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__CONF", value)
    with pytest.raises(ConfigurationError, match=re.escape(problem)):
        load_settings(TidemarkSettings)


@pytest.mark.parametrize("master", ["local[2]", "local[16]", "local[*]", "spark://spark-master:7077",
                                    "spark://10.0.0.5:7077,10.0.0.6:7077"])
def test_the_spark_master_is_local_mode_or_a_standalone_cluster(monkeypatch, master: str) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__MASTER", master)
    assert load_settings(TidemarkSettings).spark.master == master


@pytest.mark.parametrize("master", ["local", "local[0]", "yarn", "k8s://https://api:6443", "spark://", "spark://host",
                                    "local[2] ", "spark://host:7077/"])
def test_another_spark_master_fails_in_one_line_naming_the_key(monkeypatch, master: str) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__MASTER", master)
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    assert str(raised.value) == (
        "invalid configuration: TIDEMARK_SPARK__MASTER: Value error, not a Spark master Tidemark runs on: "
        f"'local[N]', 'local[*]' or 'spark://host:port' (got {master!r})")


def test_the_local_mode_on_the_loopback_is_the_default_spark_master() -> None:
    spark = TidemarkSettings().spark
    assert (spark.master, spark.driver_host) == ("local[2]", "127.0.0.1")


def test_a_driver_host_that_is_no_address_fails_naming_the_key(monkeypatch) -> None:
    monkeypatch.setenv("TIDEMARK_SPARK__DRIVER_HOST", "worker host")
    with pytest.raises(ConfigurationError, match=re.escape("TIDEMARK_SPARK__DRIVER_HOST: String should match")):
        load_settings(TidemarkSettings)
