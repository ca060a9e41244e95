"""``tidemark state inspect`` and ``tidemark state read``: the metadata view as a table or JSON,
one state to JSON lines with a progress line per old task, and one-line errors with exit 2 for a
wrong id, path, stage or state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.storage.filesystem import FilesystemCheckpointStorage

from state_processor_stage import harness, request

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def storage_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("checkpoints")
    with harness("heap", 2, storage=FilesystemCheckpointStorage(root)) as h:
        h.process_all(request(i) for i in range(40))
        h.snapshot(checkpoint_id=3)
    return root.as_uri()


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["state", *args])
    return result.exit_code, result.stdout, result.stderr


def test_inspect_prints_the_stages_tasks_and_states(storage_url: str) -> None:
    code, out, _ = run("inspect", "profiles", "--checkpoint", "3", "--storage", storage_url)
    assert code == 0, out
    assert "savepoint 3 of job profiles: profiles/savepoints/sp-3/_metadata" in out
    assert "stage profile: 2 tasks, full snapshot, backend heap" in out
    assert "profile#0" in out and "0-63" in out and "by_method" in out and "MAP" in out
    code, out, _ = run("inspect", "profiles", "--savepoint", "profiles/savepoints/sp-3", "--storage", storage_url,
                       "--json")
    assert code == 0
    assert [t["task"] for t in json.loads(out)["stages"][0]["tasks"]] == ["profile#0", "profile#1"]


def test_read_writes_json_lines_with_a_progress_line_per_task(storage_url: str, tmp_path: Path) -> None:
    output = tmp_path / "count.jsonl"
    code, out, err = run("read", "profiles", "--checkpoint", "3", "--storage", storage_url, "--stage", "profile",
                         "--state", "count", "--output", str(output))
    assert code == 0, err
    rows = [json.loads(line) for line in output.read_text().splitlines()]
    assert out.strip() == f"{len(rows)} rows written to {output}"
    assert len(rows) == 17 and sum(r["value"] for r in rows) == 40
    assert set(rows[0]) == {"key", "namespace", "user_key", "value", "key_group", "task"}
    assert [line.split(": ")[1].split(",")[0] for line in err.strip().splitlines()] == ["1/2 tasks read",
                                                                                        "2/2 tasks read"]
    timers = tmp_path / "timers.jsonl"
    assert run("read", "profiles", "--checkpoint", "3", "--storage", storage_url, "--stage", "profile",
               "--view", "timers", "--output", str(timers))[0] == 0
    assert len(timers.read_text().splitlines()) == 40


@pytest.mark.parametrize(("args", "message"), [
    (["inspect", "profiles", "--checkpoint", "9"], "job 'profiles' has no retained checkpoint or savepoint 9"),
    (["inspect", "other", "--checkpoint", "3"], "job 'other' has nothing in checkpoint storage"),
    (["inspect", "profiles", "--savepoint", "profiles/savepoints/sp-4"], "no checkpoint or savepoint metadata at"),
    (["inspect", "profiles"], "give exactly one of --checkpoint ID and --savepoint PATH"),
    (["read", "profiles", "--checkpoint", "3", "--stage", "nope", "--state", "count", "--output", "x"],
     "has no stage 'nope'; its stages: profile"),
    (["read", "profiles", "--checkpoint", "3", "--stage", "profile", "--state", "nope", "--output", "x"],
     "stage 'profile' has no keyed state 'nope'"),
    (["read", "profiles", "--checkpoint", "3", "--stage", "profile", "--output", "x"], "--view state needs --state"),
])
def test_a_wrong_id_path_stage_or_state_exits_2_with_one_line(storage_url: str, args: list[str], message: str,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run(*args, "--storage", storage_url)
    assert code == 2, out + err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_a_corrupted_state_file_exits_1_with_one_line_naming_it(tmp_path: Path) -> None:
    with harness("heap", 2, storage=FilesystemCheckpointStorage(tmp_path)) as h:
        h.process_all(request(i) for i in range(10))
        snapshot = h.snapshot()
    damaged = snapshot.metadata.tasks[0].state_handles[0].files[0].path  # the header inspect reads
    (tmp_path / damaged).write_bytes(b"not a snapshot")
    for args in (["inspect", "profiles", "--checkpoint", "1"],
                 ["read", "profiles", "--checkpoint", "1", "--stage", "profile", "--state", "count",
                  "--output", str(tmp_path / "out.jsonl")]):
        code, out, err = run(*args, "--storage", tmp_path.as_uri())
        lines = err.strip().splitlines()
        assert code == 1, out + err
        assert damaged in lines[-1] and lines[-1].startswith(f"tidemark state {args[0]}: "), err
    assert not (tmp_path / "out.jsonl").exists()
