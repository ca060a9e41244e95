"""``tidemark verify``, ``topics`` and ``generate`` refuse bad usage, and the lack of a broker, with
one line and a documented exit status, before they reach Kafka."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tidemark.cli import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("args", "message"), [
    (["verify", "out"], "give --example NAME --input TOPIC (an example job) or --expect FILE (your job)"),
    (["verify", "out", "--example", "top_urls"], "--example top_urls needs --input TOPIC"),
    (["verify", "out", "--expect", "e.jsonl", "--input", "in"], "--input goes with --example"),
    (["verify", "out", "--example", "url_counts", "--input", "in", "--id-field", "hits"], "--id-field goes with"),
    (["verify", "out", "--expect", "missing.jsonl"], "cannot read missing.jsonl"),
    (["generate", "access-log", "--topic", "t", "--duration", "2"], "--duration needs --rate"),
    (["generate", "access-log", "--topic", "t", "--rate", "5", "--duration", "2", "--records", "3"],
     "give --records or --rate with --duration, not both"),
    (["topics", "create", "bad name"], "invalid topic name 'bad name'"),
])
def test_usage_errors_exit_2_with_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_no_broker_to_use_is_a_configuration_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("TIDEMARK_HOME", raising=False)
    result = CliRunner().invoke(app, ["topics", "list"])
    assert result.exit_code == 78
    assert result.output.strip() == ("tidemark topics list: invalid configuration: KAFKA_BOOTSTRAP_SERVERS: unset "
                                     "and no embedded broker is running under .tidemark/broker (start one with "
                                     "`tidemark broker start`)")
