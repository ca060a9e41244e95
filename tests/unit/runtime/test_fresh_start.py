"""The fresh-start record (``--fresh --start-id``) in real filesystem checkpoint storage, and the
``--start-id`` usage errors of ``tidemark jobs run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.runtime.supervisor.fresh_start import (
    FreshStart,
    UnreadableFreshStart,
    is_restart,
    read_fresh_start,
    record_fresh_start,
    record_path,
)
from tidemark.start_request import validate_start_id
from tidemark.storage import open_storage
from tidemark.types import JobId

JOB = JobId("orders")


def test_record_round_trips_and_is_replaced(tmp_path: Path) -> None:
    storage = open_storage(tmp_path.as_uri())
    assert read_fresh_start(storage, JOB) is None
    record_fresh_start(storage, JOB, FreshStart("9f2c01ab", 7, 1_700_000_000_000))
    assert (tmp_path / "orders" / "fresh-start.json").is_file()
    assert read_fresh_start(storage, JOB) == FreshStart("9f2c01ab", 7, 1_700_000_000_000)
    record_fresh_start(storage, JOB, FreshStart("0c3d77e1", 12, 1_700_000_100_000))
    assert read_fresh_start(storage, JOB) == FreshStart("0c3d77e1", 12, 1_700_000_100_000)
    assert read_fresh_start(storage, JobId("other")) is None


def test_a_start_is_a_restart_only_with_the_recorded_start_id() -> None:
    recorded = FreshStart("rev-a", 3, 1)
    assert is_restart(recorded, "rev-a")
    assert not is_restart(recorded, "rev-b")
    assert not is_restart(None, "rev-a")


@pytest.mark.parametrize("content", [b"{oops", b"[]", b'{"start_id": "a"}',
                                     b'{"start_id": "a", "baseline": "x", "started_at": 1}'])
def test_an_undecodable_record_is_reported_with_its_path(tmp_path: Path, content: bytes) -> None:
    storage = open_storage(tmp_path.as_uri())
    storage.write_bytes(record_path(JOB), content)
    with pytest.raises(UnreadableFreshStart, match="orders/fresh-start.json in checkpoint storage does not decode"):
        read_fresh_start(storage, JOB)


def test_record_is_plain_json(tmp_path: Path) -> None:
    storage = open_storage(tmp_path.as_uri())
    record_fresh_start(storage, JOB, FreshStart("abc", 0, 5))
    assert json.loads((tmp_path / "orders" / "fresh-start.json").read_text()) == \
        {"start_id": "abc", "baseline": 0, "started_at": 5}


@pytest.mark.parametrize("value", ["3f9a1c2b7d4e5f60", "rev-12", "release.v1:abc_9", "a" * 128])
def test_usable_start_ids(value: str) -> None:
    assert validate_start_id(value) == value


@pytest.mark.parametrize("value", ["", "a b", "-x", "../up", "a/b", "a" * 129, "é"])
def test_unusable_start_ids(value: str) -> None:
    with pytest.raises(ValueError, match="--start-id must be"):
        validate_start_id(value)


def test_job_ids_are_checked_like_every_storage_path() -> None:
    with pytest.raises(ValueError, match="job id not usable"):
        record_path(JobId("../x"))


@pytest.mark.parametrize("args, fragment", [
    (["--start-id", "rev-1"], "--start-id only applies with --fresh"),
    (["--from-checkpoint", "3", "--start-id", "rev-1"], "--start-id only applies with --fresh"),
    (["--fresh", "--start-id", "a b"], "--start-id must be 1-128 letters"),
])
def test_start_id_usage_errors_exit_2_with_one_line(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["jobs", "run", "tidemark.examples.access_log:top_urls", *args])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [next(li for li in result.stderr.splitlines() if fragment in li)]
    assert result.stderr.startswith("tidemark jobs run: ")
