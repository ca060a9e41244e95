"""Writing savepoints: a stage's state bootstrapped from rows, read back by the reader and restored
by the harness as a job restores it, heap and RocksDB, at other parallelisms; where a savepoint may
go; nothing left behind by a write that failed."""

from __future__ import annotations

from typing import Any

import pytest

from tidemark.checkpoint_store.catalog import list_retained
from tidemark.checkpoint_store.verification import verify_checkpoint
from tidemark.state import ValueStateDescriptor
from tidemark.state_processor import StateReader, WriteOptionError
from tidemark.state_processor.bootstrap import StateData, bootstrap_savepoint
from tidemark.storage.base import InvalidStoragePath, TargetConflict
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.testing.harness import HarnessSnapshot

from state_processor_stage import COUNT, KEYED, STAGE, STATUSES, harness, keyed_state_of, request

pytestmark = pytest.mark.unit
KEYS = [f"10.0.0.{i}" for i in range(17)]


def table() -> dict[str, dict[str, Any]]:
    """A value of every state kind for each key, as the reader reads (and the harness holds) them."""
    return {"count": {k: i + 1 for i, k in enumerate(KEYS)},
            "last_seen": {k: 1000 * i for i, k in enumerate(KEYS)},
            "statuses": {k: [200, 404 + i] for i, k in enumerate(KEYS)},
            "by_method": {k: {"GET": i, "POST": 1} for i, k in enumerate(KEYS)},
            "total_bytes": {k: 10 * i for i, k in enumerate(KEYS)},
            "average_bytes": {k: [10 * i, 2] for i, k in enumerate(KEYS)}}


def state_data() -> list[StateData]:
    values = table()
    return [StateData(d, list(values[d.name].items())) for d in KEYED]


def read_all(reader: StateReader, stage: str = STAGE) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, row in reader.read_states(stage):
        if row.user_key is not None:
            out.setdefault(name, {}).setdefault(row.key, {})[row.user_key] = row.value
        else:
            out.setdefault(name, {})[row.key] = row.value
    return out


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
@pytest.mark.parametrize("parallelism", [1, 3])
def test_a_bootstrapped_stage_reads_back_as_written_and_restores_at_another_parallelism(
        tmp_path, backend: str, parallelism: int) -> None:
    storage = FilesystemCheckpointStorage(tmp_path)
    progress: list[str] = []
    written = bootstrap_savepoint(storage, "profiles", {STAGE: state_data()}, parallelism=parallelism,
                                  max_parallelism=128, backend=backend, progress=progress.append)
    assert written.path.startswith("profiles/savepoints/bootstrap-1-") and written.path.endswith("/_metadata")
    assert verify_checkpoint(storage, written.path) == written.metadata
    assert [t.task_id for t in written.metadata.tasks] == [f"{STAGE}#{i}" for i in range(parallelism)]
    assert written.metadata.checkpoint_type.is_savepoint and written.metadata.max_parallelism == 128
    assert progress[-1] == f"stage {STAGE}: {parallelism}/{parallelism} tasks written ({6 * len(KEYS)} rows)"
    reader = StateReader.open(storage, "profiles", path=written.directory)
    assert read_all(reader) == table()
    assert {p.task for p in reader.partitions(STAGE)} == {t.task_id for t in written.metadata.tasks}
    from tidemark.state_processor import inspect_checkpoint

    assert inspect_checkpoint(reader.source).stages[0].backend == backend

    restored = harness(backend, 2, storage=storage)
    with restored.restore(HarnessSnapshot(storage, written.path, written.metadata)):
        assert keyed_state_of(restored, KEYS) == table()
        restored.process(request(3))  # the job goes on from the bootstrapped values
        assert restored.state(COUNT, request(3)["ip"]).value() == table()["count"][request(3)["ip"]] + 1


def test_keys_of_every_kind_and_none_values(tmp_path) -> None:
    storage = FilesystemCheckpointStorage(tmp_path)
    rows = [("url", 1), (7, 2), (b"\x00raw", 3), ("empty", None), ("url", 4)]  # a later row of a key wins
    written = bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, rows)]}, parallelism=2,
                                  max_parallelism=16)
    reader = StateReader.open(storage, "profiles", path=written.path)
    assert {r.key: r.value for r in reader.read(STAGE, "count")} == {"url": 4, 7: 2, b"\x00raw": 3}
    assert written.metadata.max_parallelism == 16


def test_the_checkpoint_id_follows_the_jobs_newest(tmp_path) -> None:
    storage = FilesystemCheckpointStorage(tmp_path)
    with harness("heap", 2, storage=storage) as h:
        h.process(request(1))
        h.snapshot(checkpoint_id=7, savepoint=False)
    written = bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, [("a", 1)])]}, parallelism=1,
                                  max_parallelism=128, target="profiles/savepoints/from-table")
    assert written.path == "profiles/savepoints/from-table/_metadata"
    assert written.metadata.checkpoint_id == 8
    # not a retained savepoint of the checkpoint-store's (those are sp-<id>), and no retained one changed
    assert [e.metadata.checkpoint_id for e in list_retained(storage, "profiles", savepoints=True).entries] == []
    assert bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, [("a", 1)])]}, parallelism=1,
                               max_parallelism=128, checkpoint_id=3).metadata.checkpoint_id == 3


def test_where_a_savepoint_may_be_written(tmp_path) -> None:
    storage = FilesystemCheckpointStorage(tmp_path)
    states = {STAGE: [StateData(COUNT, [("a", 1)])]}
    bootstrap_savepoint(storage, "profiles", states, parallelism=1, max_parallelism=128,
                        target="profiles/savepoints/one")
    with pytest.raises(TargetConflict, match="is an existing savepoint"):
        bootstrap_savepoint(storage, "profiles", states, parallelism=1, max_parallelism=128,
                            target="profiles/savepoints/one")
    with pytest.raises(InvalidStoragePath, match="inside the job's savepoint area"):
        bootstrap_savepoint(storage, "profiles", states, parallelism=1, max_parallelism=128, target="elsewhere/x")
    with pytest.raises(WriteOptionError, match=r"parallelism must be in \[1, max parallelism 8\], got 9"):
        bootstrap_savepoint(storage, "profiles", states, parallelism=9, max_parallelism=8)
    with pytest.raises(WriteOptionError, match="no state backend 'disk'; backends: heap, rocksdb"):
        bootstrap_savepoint(storage, "profiles", states, parallelism=1, max_parallelism=8, backend="disk")
    with pytest.raises(WriteOptionError, match="given a state twice"):
        bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, []), StateData(COUNT, [])]},
                            parallelism=1, max_parallelism=8)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_a_write_that_fails_leaves_nothing(tmp_path, backend: str) -> None:
    storage = FilesystemCheckpointStorage(tmp_path)

    def rows():
        yield "a", 1
        raise RuntimeError("the table went away")

    states = {"first": [StateData(COUNT, [("b", 2)])], STAGE: [StateData(COUNT, rows())]}
    with pytest.raises(RuntimeError, match="the table went away"):
        bootstrap_savepoint(storage, "profiles", states, parallelism=2, max_parallelism=128, backend=backend,
                            target="profiles/savepoints/failed")
    assert list(storage.list("profiles/")) == []
    with pytest.raises(TypeError, match="a value of list state 'statuses' is a list, not int"):
        bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(STATUSES, [("a", 1)])]}, parallelism=1,
                            max_parallelism=128)
    with pytest.raises(TypeError, match="a state key must be str, bytes or int"):
        bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, [(1.5, 1)])]}, parallelism=1,
                            max_parallelism=128)
    assert list(storage.list("profiles/")) == []


def test_a_value_with_a_dataclass_serializer_reads_back_as_its_fields(tmp_path) -> None:
    from dataclasses import dataclass

    from tidemark.state import DataclassSerializer

    @dataclass
    class Visit:
        hits: int
        last: str

    visits = ValueStateDescriptor("visits", serializer=DataclassSerializer(Visit))
    storage = FilesystemCheckpointStorage(tmp_path)
    written = bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(visits, [("a", Visit(3, "/x"))])]},
                                  parallelism=1, max_parallelism=128)
    rows = list(StateReader.open(storage, "profiles", path=written.path).read(STAGE, "visits"))
    assert [(r.key, r.value) for r in rows] == [("a", {"hits": 3, "last": "/x"})]


def test_a_savepoint_is_written_and_derived_in_s3(s3_bucket: str) -> None:
    from tidemark.state_processor import MapState, RenameStage, open_source, transform_savepoint
    from tidemark.storage import open_storage

    storage = open_storage(f"s3://{s3_bucket}/root")
    written = bootstrap_savepoint(storage, "profiles", {STAGE: state_data()}, parallelism=2, max_parallelism=128,
                                  backend="rocksdb")
    assert read_all(StateReader.open(storage, "profiles", path=written.path)) == table()
    renamed = transform_savepoint(open_source(storage, "profiles", path=written.path), [RenameStage(STAGE, "p")])
    mapped = transform_savepoint(open_source(storage, "profiles", path=renamed.path),
                                 [MapState("p", "count", lambda key, count: -count)])
    assert {r.key: r.value for r in StateReader.open(storage, "profiles", path=mapped.path).read("p", "count")} == {
        k: -v for k, v in table()["count"].items()}
    before = set(storage.list("profiles/"))

    def failing():
        yield "a", 1
        raise RuntimeError("the table went away")

    with pytest.raises(RuntimeError):
        bootstrap_savepoint(storage, "profiles", {STAGE: [StateData(COUNT, failing())]}, parallelism=1,
                            max_parallelism=128)
    assert set(storage.list("profiles/")) == before
