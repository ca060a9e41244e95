"""Which JVM options map the class archive (``tidemark.spark.class_archive``): none until it is
built, then the archive with sharing that falls back quietly."""

from __future__ import annotations

from pathlib import Path

from tidemark.spark.class_archive import archive_path, with_archive


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
