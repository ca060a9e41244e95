"""``tidemark state bootstrap`` and ``tidemark state transform``: a savepoint from JSON lines or a
Python spec, derived with options or a spec, progress lines on stderr, and one-line errors with
exit 2 for a wrong path, stage, state, spec, input row or target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.state_processor import StateReader
from tidemark.storage.filesystem import FilesystemCheckpointStorage

pytestmark = pytest.mark.unit
JOB = "access-log-counts"

SPEC = '''
from tidemark.state import MapStateDescriptor, ValueStateDescriptor
from tidemark.state_processor import MapState, RenameStage, SetState, StateData


def stages():
    return {"count_hits": [StateData(ValueStateDescriptor("hits", default=0), [("/a", 1), ("/b", 2)]),
                           StateData(MapStateDescriptor("by_status"), [("/a", {200: 1})])]}


def double(key, value):
    return value * 2


def operations():
    return [RenameStage("count_hits", "url_hits"), MapState("url_hits", "hits", double),
            SetState("url_hits", StateData(ValueStateDescriptor("first_seen"), [("/a", 17)]))]


def not_a_spec():
    return 42
'''


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["state", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "spec.py").write_text(SPEC)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({"url": f"/p/{i}", "hits": i}) + "\n" for i in range(50)))
    return tmp_path


def values(root: Path, path: str, stage: str, state: str) -> dict:
    reader = StateReader.open(FilesystemCheckpointStorage(root / "cp"), JOB, path=path)
    return {r.key if r.user_key is None else (r.key, r.user_key): r.value for r in reader.read(stage, state)}


def test_bootstrap_from_json_lines_then_transform_with_options(workdir: Path) -> None:
    storage = (workdir / "cp").as_uri()
    code, out, err = run("bootstrap", JOB, "--stage", "count_hits", "--state", "hits", "--input", "rows.jsonl",
                         "--key-field", "url", "--value-field", "hits", "--parallelism", "2",
                         "--target", f"{JOB}/savepoints/from-table", "--storage", storage)
    assert code == 0, err
    assert out.splitlines() == [
        f"savepoint 1 of job {JOB} written to {JOB}/savepoints/from-table/_metadata: 1 stages, 2 tasks, "
        f"max parallelism 128, {out.split(', ')[-1].split()[0]} bytes",
        f"start the job from it with --from-savepoint {JOB}/savepoints/from-table/_metadata"]
    assert err.splitlines() == [f"tidemark state bootstrap: stage count_hits: {i}/2 tasks written (50 rows)"
                                for i in (1, 2)]
    assert values(workdir, f"{JOB}/savepoints/from-table", "count_hits", "hits") == {f"/p/{i}": i for i in range(50)}

    code, out, err = run("transform", JOB, "--savepoint", f"{JOB}/savepoints/from-table", "--storage", storage,
                         "--rename-stage", "count_hits=url_hits", "--map", "url_hits/hits=spec.py:double",
                         "--max-parallelism", "64", "--target", f"{JOB}/savepoints/derived")
    assert code == 0, err
    assert "1 stages, 2 tasks, max parallelism 64" in out
    assert err.splitlines()[-1].startswith("tidemark state transform: stage url_hits: 2 tasks written, 50 entries")
    assert values(workdir, f"{JOB}/savepoints/derived", "url_hits", "hits") == {f"/p/{i}": 2 * i for i in range(50)}
    code, out, err = run("transform", JOB, "--savepoint", f"{JOB}/savepoints/derived", "--storage", storage,
                         "--remove-state", "url_hits/hits", "--target", f"{JOB}/savepoints/emptied")
    assert code == 0, err
    reader = StateReader.open(FilesystemCheckpointStorage(workdir / "cp"), JOB, path=f"{JOB}/savepoints/emptied")
    assert reader.state_names("url_hits") == []


def test_bootstrap_and_transform_from_python_specs(workdir: Path) -> None:
    storage = (workdir / "cp").as_uri()
    code, _, err = run("bootstrap", JOB, "--spec", "spec.py:stages", "--storage", storage, "--backend", "rocksdb",
                       "--target", f"{JOB}/savepoints/spec")
    assert code == 0, err
    assert values(workdir, f"{JOB}/savepoints/spec", "count_hits", "by_status") == {("/a", 200): 1}
    code, _, err = run("transform", JOB, "--savepoint", f"{JOB}/savepoints/spec", "--storage", storage,
                       "--spec", "spec.py:operations", "--target", f"{JOB}/savepoints/spec-derived")
    assert code == 0, err
    derived = f"{JOB}/savepoints/spec-derived"
    assert values(workdir, derived, "url_hits", "hits") == {"/a": 2, "/b": 4}
    assert values(workdir, derived, "url_hits", "first_seen") == {"/a": 17}
    assert values(workdir, derived, "url_hits", "by_status") == {("/a", 200): 1}


@pytest.mark.parametrize(("args", "message"), [
    (["transform", JOB, "--checkpoint", "9", "--remove-stage", "x"], f"job '{JOB}' has no retained checkpoint"),
    (["transform", JOB, "--savepoint", f"{JOB}/savepoints/nope", "--remove-stage", "x"],
     "no checkpoint or savepoint metadata at"),
    (["transform", JOB, "--savepoint", "SP", "--rename-stage", "nope=x"], "has no stage 'nope'; its stages: count_hits"),
    (["transform", JOB, "--savepoint", "SP", "--map", "count_hits/nope=spec.py:double"],
     "stage 'count_hits' has no keyed state 'nope'"),
    (["transform", JOB, "--savepoint", "SP", "--map", "count_hits/hits=spec.py:triple"],
     "spec.py has no attribute 'triple'"),
    (["transform", JOB, "--savepoint", "SP", "--map", "count_hits/hits=missing.py:f"], "no file missing.py"),
    (["transform", JOB, "--savepoint", "SP", "--map", "count_hits/hits=no_such_module:f"],
     "cannot load no_such_module: ModuleNotFoundError"),
    (["transform", JOB, "--savepoint", "SP", "--spec", "spec.py:not_a_spec"], "gives a int, not a list of"),
    (["transform", JOB, "--savepoint", "SP", "--rename-stage", "count_hits"], "--rename-stage takes A=B"),
    (["transform", JOB, "--savepoint", "SP"], "nothing to change"),
    (["transform", JOB, "--savepoint", "SP", "--remove-stage", "count_hits", "--target", "other/x"],
     "target must be inside the job's savepoint area"),
    (["transform", JOB, "--savepoint", "SP", "--remove-stage", "count_hits", "--target", "SP"],
     "is an existing savepoint"),
    (["bootstrap", JOB, "--stage", "count_hits", "--state", "hits", "--input", "missing.jsonl"],
     "cannot read missing.jsonl"),
    (["bootstrap", JOB, "--stage", "count_hits", "--state", "hits", "--input", "rows.jsonl"],
     "rows.jsonl:1: not an object with fields 'key' and 'value'"),
    (["bootstrap", JOB, "--stage", "count_hits", "--state", "hits"], "give --stage, --state and --input"),
    (["bootstrap", JOB, "--spec", "spec.py:not_a_spec"], "not a mapping of stage names to lists of StateData"),
    (["bootstrap", JOB, "--spec", "spec.py:stages", "--parallelism", "200"],
     "parallelism must be in [1, max parallelism 128], got 200"),
    (["bootstrap", JOB, "--stage", "count.hits", "--state", "hits", "--input", "rows.jsonl", "--key-field", "url",
      "--value-field", "hits"], "'count.hits' cannot name a stage"),
])
def test_a_wrong_path_stage_state_spec_or_target_exits_2_with_one_line(workdir: Path, args: list[str],
                                                                        message: str) -> None:
    storage = (workdir / "cp").as_uri()
    code, _, err = run("bootstrap", JOB, "--spec", "spec.py:stages", "--storage", storage,
                       "--target", f"{JOB}/savepoints/sp")
    assert code == 0, err
    before = sorted((workdir / "cp").rglob("*"))
    code, out, err = run(*[f"{JOB}/savepoints/sp" if a == "SP" else a for a in args], "--storage", storage)
    assert code == 2, out + err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert sorted((workdir / "cp").rglob("*")) == before


def test_a_map_function_that_raises_exits_1_with_one_line(workdir: Path) -> None:
    (workdir / "bad.py").write_text("def f(key, value):\n    raise KeyError('no rate for ' + key)\n")
    storage = (workdir / "cp").as_uri()
    assert run("bootstrap", JOB, "--spec", "spec.py:stages", "--storage", storage,
               "--target", f"{JOB}/savepoints/sp")[0] == 0
    code, out, err = run("transform", JOB, "--savepoint", f"{JOB}/savepoints/sp", "--storage", storage,
                         "--map", "count_hits/hits=bad.py:f", "--target", f"{JOB}/savepoints/mapped")
    assert code == 1, out + err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("tidemark state transform: KeyError: ") and "no rate for /" in lines[-1], err
    assert not (workdir / "cp" / JOB / "savepoints" / "mapped" / "_metadata").exists()
