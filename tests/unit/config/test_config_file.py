"""The YAML settings file (``TIDEMARK_CONFIG_FILE``): precedence, unknown keys, unreadable files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidemark.config.settings import ConfigurationError, TidemarkSettings, load_settings
from tidemark.services.coordinator.settings import CoordinatorSettings


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("TIDEMARK_") or name == "KAFKA_BOOTSTRAP_SERVERS":
            monkeypatch.delenv(name)


def _config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tidemark.yaml"
    path.write_text(text)
    monkeypatch.setenv("TIDEMARK_CONFIG_FILE", str(path))
    return path


def test_environment_over_file_over_defaults(monkeypatch, tmp_path) -> None:
    _config(monkeypatch, tmp_path, "topic_prefix: from-file\nhttp_port: 9555\n"
                                   "bootstrap_servers: file:9092\n"
                                   "kafka: {security_protocol: SASL_SSL, sasl_mechanism: PLAIN}\n"
                                   "checkpoint: {interval_ms: 700}\n")
    monkeypatch.setenv("TIDEMARK_HTTP_PORT", "9666")
    monkeypatch.setenv("TIDEMARK_KAFKA__SASL_USERNAME", "alice")
    settings = load_settings(CoordinatorSettings)
    assert (settings.topic_prefix, settings.http_port, settings.bootstrap_servers) == ("from-file", 9666, "file:9092")
    assert (settings.kafka.security_protocol, settings.kafka.sasl_username) == ("SASL_SSL", "alice")  # merged
    assert (settings.checkpoint.interval_ms, settings.checkpoint.timeout_ms) == (700, 600000)  # default kept
    assert settings.log_level == "INFO"


@pytest.mark.parametrize("value", [None, ""])
def test_no_variable_means_no_file(monkeypatch, value) -> None:
    if value is not None:
        monkeypatch.setenv("TIDEMARK_CONFIG_FILE", value)
    assert load_settings(TidemarkSettings).topic_prefix == "tidemark"


def test_an_unknown_or_invalid_key_in_the_file_is_named(monkeypatch, tmp_path) -> None:
    _config(monkeypatch, tmp_path, "topic_prefx: x\nkafka: {replication_factor: 0}\n")
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    assert dict(raised.value.problems) == {
        "TIDEMARK_KAFKA__REPLICATION_FACTOR": "Input should be greater than or equal to 1 (got 0)",
        "TIDEMARK_TOPIC_PREFX": "Extra inputs are not permitted (got 'x')",
    }


def test_a_yaml_syntax_error_names_the_file_in_one_line(monkeypatch, tmp_path) -> None:
    path = _config(monkeypatch, tmp_path, "kafka: {security_protocol: SSL\nhome: [\n")
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    [(key, reason)] = raised.value.problems
    assert key == "TIDEMARK_CONFIG_FILE" and reason.startswith(f"{path} is not valid YAML: ")
    assert "line 2" in reason and "\n" not in str(raised.value)


@pytest.mark.parametrize(("text", "reason"), [("- a\n- b\n", "must hold a mapping"), ("42\n", "must hold a mapping")])
def test_a_file_that_is_not_a_mapping_is_refused(monkeypatch, tmp_path, text, reason) -> None:
    path = _config(monkeypatch, tmp_path, text)
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    assert raised.value.problems == [("TIDEMARK_CONFIG_FILE", f"{path} {reason}")]


def test_an_empty_file_is_no_settings(monkeypatch, tmp_path) -> None:
    _config(monkeypatch, tmp_path, "# nothing yet\n")
    assert load_settings(TidemarkSettings).http_port == 0


@pytest.mark.parametrize(("name", "reason"), [("missing.yaml", "no such file"), (".", "is a directory")])
def test_a_named_file_must_exist(monkeypatch, tmp_path, name, reason) -> None:
    path = tmp_path / name
    monkeypatch.setenv("TIDEMARK_CONFIG_FILE", str(path))
    with pytest.raises(ConfigurationError) as raised:
        load_settings(TidemarkSettings)
    assert raised.value.problems == [("TIDEMARK_CONFIG_FILE", f"cannot read {path}: {reason}")]
