"""Discarded checkpoints leave no directories; query checkpoint locations of workers leave none."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tidemark.spark.session import query_checkpoint_location, reclaim_query_locations
from tidemark.storage.filesystem import FilesystemCheckpointStorage


def test_deleting_the_last_file_removes_the_empty_directories_up_to_the_root(tmp_path: Path) -> None:
    storage = FilesystemCheckpointStorage(tmp_path / "root")
    for cid in range(1, 6):
        storage.write_bytes(f"job/chk-{cid}/op/task-0/state", b"x")
        storage.write_bytes(f"job/chk-{cid}/_metadata", b"m")
    for cid in range(1, 4):
        for path in list(storage.list(f"job/chk-{cid}/")):
            storage.delete(path)
    assert sorted(p.name for p in (tmp_path / "root" / "job").iterdir()) == ["chk-4", "chk-5"]
    for path in list(storage.list("job/")):
        storage.delete(path)
    assert list((tmp_path / "root").iterdir()) == []  # the root itself stays
    storage.write_bytes("job/chk-9/_metadata", b"m")  # directories come back on write
    assert storage.exists("job/chk-9/_metadata")


def test_a_query_location_is_removed_on_exit_and_orphans_of_dead_processes_are_reclaimed(tmp_path: Path) -> None:
    with query_checkpoint_location("job-stage", root=tmp_path) as location:
        assert Path(location).is_dir() and Path(location).name.startswith(f"tidemark-query-{os.getpid()}-")
    assert not Path(location).exists()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    orphan = tmp_path / f"tidemark-query-{dead}-job-stage-abc"
    (orphan / "offsets").mkdir(parents=True)
    mine = tmp_path / f"tidemark-query-{os.getpid()}-job-other-abc"
    mine.mkdir()
    assert reclaim_query_locations(tmp_path) == [orphan]
    assert not orphan.exists() and mine.exists()
