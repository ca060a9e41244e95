"""``tidemark state bootstrap --format parquet``: a Parquet table written into a savepoint by a
local Spark session of the command's own (started and stopped by it), read back as the table;
a path that is not Parquet exits 2 with one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tidemark.cli import app
from tidemark.state_processor import StateReader
from tidemark.storage.filesystem import FilesystemCheckpointStorage

pytestmark = pytest.mark.spark
JOB = "access-log-counts"


def test_a_parquet_table_bootstraps_a_savepoint_through_spark(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = tmp_path / "hits.parquet"
    pq.write_table(pa.table({"url": [f"/page/{i}" for i in range(200)], "hits": list(range(200))}), table)
    storage = (tmp_path / "cp").as_uri()
    result = CliRunner().invoke(app, ["state", "bootstrap", JOB, "--stage", "count_hits", "--state", "hits",
                                      "--input", str(table), "--format", "parquet", "--key-field", "url",
                                      "--value-field", "hits", "--parallelism", "2", "--storage", storage,
                                      "--target", f"{JOB}/savepoints/from-parquet"])
    assert result.exit_code == 0, result.stdout + result.stderr
    assert f"written to {JOB}/savepoints/from-parquet/_metadata: 1 stages, 2 tasks" in result.stdout
    assert "tidemark state bootstrap: stage count_hits: 2 tasks written (200 rows)" in result.stderr
    reader = StateReader.open(FilesystemCheckpointStorage(tmp_path / "cp"), JOB, path=f"{JOB}/savepoints/from-parquet")
    assert {r.key: r.value for r in reader.read("count_hits", "hits")} == {f"/page/{i}": i for i in range(200)}



@pytest.mark.parametrize(("name", "message"), [("hits.csv", "is not a Parquet file"), ("missing", "cannot read"),
                                               ("empty-dir", "holds no .parquet file")])
def test_a_path_that_is_not_parquet_exits_2_with_one_line_before_spark_starts(tmp_path: Path, name: str,
                                                                               message: str) -> None:
    (tmp_path / "hits.csv").write_text("url,hits\n/a,1\n")
    (tmp_path / "empty-dir").mkdir()
    result = CliRunner().invoke(app, ["state", "bootstrap", JOB, "--stage", "count_hits", "--state", "hits",
                                      "--input", str(tmp_path / name), "--format", "parquet",
                                      "--storage", (tmp_path / "cp").as_uri()])
    assert result.exit_code == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"tidemark state bootstrap: {tmp_path / name}") or line.startswith(
        f"tidemark state bootstrap: cannot read {tmp_path / name}"), line
    assert message in line
    assert not (tmp_path / "cp").exists()
