"""``tidemark generate access-log`` against a real broker: a second run continues the first in
event time (its records are numbered after those already in the topic), unless ``--first`` says
otherwise; so the windowed example sees none of them behind its watermark."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.verification.committed_reader import read_to_end


def _event_times(bootstrap: str, topic: str) -> list[int]:
    return sorted(json.loads(r.value)["ts"] for r in read_to_end({"bootstrap.servers": bootstrap}, topic))


def test_a_second_run_continues_the_first_in_event_time(kafka_bootstrap, unique_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    topic = unique_name("generated")
    runner = CliRunner()
    created = runner.invoke(app, ["topics", "create", topic, "--partitions", "3"])
    assert created.exit_code == 0, created.output
    first = runner.invoke(app, ["generate", "access-log", "--topic", topic, "--records", "90"])
    assert first.exit_code == 0, first.output
    assert "event time after" not in first.output  # an empty topic: from the start
    after_first = _event_times(kafka_bootstrap, topic)
    second = runner.invoke(app, ["generate", "access-log", "--topic", topic, "--records", "60", "--seed", "2"])
    assert second.exit_code == 0, second.output
    assert "event time after record 90" in second.output
    both = _event_times(kafka_bootstrap, topic)
    added = sorted(set(both) - set(after_first))
    assert len(both) == 150 and len(added) == 60 and min(added) > max(after_first)
    again = runner.invoke(app, ["generate", "access-log", "--topic", topic, "--records", "10", "--first", "0"])
    assert again.exit_code == 0 and "event time after" not in again.output
    assert min(_event_times(kafka_bootstrap, topic)) == min(after_first)
