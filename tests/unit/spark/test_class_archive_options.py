"""Which JVM options map the class archive (``tidemark.spark.class_archive``): none until it is
built, then the archive with sharing that falls back quietly."""

from __future__ import annotations

import time
from pathlib import Path

from tidemark.spark.class_archive import archive_path, ensure_archive, remove_orphans, with_archive


def test_without_an_archive_the_options_are_unchanged(tmp_path: Path) -> None:
    assert with_archive("-XX:TieredStopAtLevel=1", tmp_path) == "-XX:TieredStopAtLevel=1"
    assert with_archive("", tmp_path) == ""


def test_a_built_archive_is_mapped_after_the_given_options(tmp_path: Path) -> None:
    path = archive_path(tmp_path)
    assert path.parent == tmp_path / "spark-classes" and path.suffix == ".jsa"
    path.parent.mkdir()
    path.write_bytes(b"archive")
    options = with_archive("-XX:TieredStopAtLevel=1", tmp_path).split()
    assert options[:2] == ["-XX:TieredStopAtLevel=1", f"-XX:SharedArchiveFile={path}"]
    assert "-Xshare:auto" in options  # a misfit archive is skipped, never an error
    assert with_archive("", tmp_path).split()[0] == f"-XX:SharedArchiveFile={path}"


def test_the_archive_is_named_by_the_jdk_and_pyspark_it_was_built_from(tmp_path: Path, monkeypatch) -> None:
    before = archive_path(tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "another-jdk"))
    assert archive_path(tmp_path) != before


def test_a_failed_build_is_not_tried_again_at_every_start(tmp_path: Path) -> None:
    path = archive_path(tmp_path)
    path.parent.mkdir()
    path.with_suffix(".failed").write_text("exit code 1\n")
    started = time.monotonic()
    assert ensure_archive([], None, cache_dir=tmp_path) is None
    assert time.monotonic() - started < 1 and not path.exists()  # no training run


def test_the_archives_of_installations_that_are_gone_are_removed(tmp_path: Path) -> None:
    directory = tmp_path / "spark-classes"
    directory.mkdir()
    for name, origin in (("gone", tmp_path / "deleted-venv" / "jars"), ("here", tmp_path)):
        (directory / f"{name}.jsa").write_bytes(b"archive")
        (directory / f"{name}.origin").write_text(f"{tmp_path}\n{origin}\n")
    remove_orphans(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["here.jsa", "here.origin"]


def test_the_archive_of_an_installation_replaced_at_the_same_path_is_removed(tmp_path: Path) -> None:
    """A virtualenv created again where it was (a fresh clone of the same directory) has a new
    archive; the old one, whose origin still exists, is removed, another installation's is not."""
    from tidemark.spark.class_archive import _installation

    directory = tmp_path / "spark-classes"
    directory.mkdir()
    current = archive_path(tmp_path)
    here = "\n".join(str(p) for p in _installation()) + "\n"
    for name, origin in (("replaced", here), (current.stem, here), ("other", f"{tmp_path}\n{tmp_path}\n")):
        (directory / f"{name}.jsa").write_bytes(b"archive")
        (directory / f"{name}.origin").write_text(origin)
    remove_orphans(directory, current)
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [f"{current.stem}.jsa", f"{current.stem}.origin", "other.jsa", "other.origin"])
