"""Materializer and changelog service configuration: defaults, validation naming the key, exit 78,
and the shared-file storage view materialized snapshots are written through."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tidemark.config.settings import ConfigurationError, load_settings
from tidemark.materializer import SharedFilesView, materialization_prefix
from tidemark.services.changelog.settings import ChangelogServiceSettings
from tidemark.services.materializer.app import open_checkpoint_storage
from tidemark.services.materializer.settings import MaterializerSettings
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import JobId, TaskId


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("TIDEMARK_"):
            monkeypatch.delenv(name)


def test_defaults_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_MATERIALIZATION__INTERVAL_MS", "2000")
    monkeypatch.setenv("TIDEMARK_MATERIALIZATION__JITTER_MS", "500")
    settings = load_settings(MaterializerSettings)
    options = settings.materialization.options()
    assert (options.interval_ms, options.jitter_ms, options.failure_budget) == (2000, 500, 3)
    assert settings.http_port == 9403
    changelog = load_settings(ChangelogServiceSettings)
    assert changelog.changelog.default_partitions == 8 and changelog.changelog.delete_records


@pytest.mark.parametrize(("env", "key"), [
    ({"TIDEMARK_MATERIALIZATION__JITTER_MS": "70000"}, "TIDEMARK_MATERIALIZATION__JITTER_MS"),
    ({"TIDEMARK_MATERIALIZATION__INTERVAL_MS": "5"}, "TIDEMARK_MATERIALIZATION__INTERVAL_MS"),
    ({"TIDEMARK_MATERIALIZATION__MAX_BACKOFF_MS": "1000"}, "TIDEMARK_MATERIALIZATION__MAX_BACKOFF_MS"),
    ({"TIDEMARK_MATERIALIZATION__FAILURE_BUDGET": "none"}, "TIDEMARK_MATERIALIZATION__FAILURE_BUDGET"),
    ({"TIDEMARK_MATERIALIZATION__INTERVALMS": "1"}, "TIDEMARK_MATERIALIZATION__INTERVALMS"),
])
def test_bad_materializer_config_names_the_key(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], key: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings(MaterializerSettings)
    assert key in str(raised.value)


def test_bad_changelog_config_names_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDEMARK_CHANGELOG__DEFAULT_PARTITIONS", "0")
    with pytest.raises(ConfigurationError, match="TIDEMARK_CHANGELOG__DEFAULT_PARTITIONS"):
        load_settings(ChangelogServiceSettings)


def test_unusable_checkpoint_storage_names_the_key(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings = load_settings(MaterializerSettings, checkpoint_storage_url=(blocker / "root").as_uri())
    with pytest.raises(ConfigurationError, match="TIDEMARK_CHECKPOINT_STORAGE_URL"):
        open_checkpoint_storage(settings)


@pytest.mark.parametrize(("service", "env", "key"), [
    ("materializer", {"TIDEMARK_MATERIALIZATION__JITTER_MS": "-1"}, "TIDEMARK_MATERIALIZATION__JITTER_MS"),
    ("changelog", {"TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS": "x"}, "TIDEMARK_CHANGELOG__TRUNCATION_INTERVAL_MS"),
])
def test_the_services_exit_78_naming_the_key(service: str, env: dict[str, str], key: str, tmp_path) -> None:
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "run", service],
                            env={**os.environ, "TIDEMARK_HOME": str(tmp_path), **env},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 78 and key in result.stderr


def test_the_view_writes_every_file_shared_under_the_task_folder(tmp_path) -> None:
    root = FilesystemCheckpointStorage(tmp_path / "root")
    prefix = materialization_prefix(JobId("orders"), TaskId("counts#0"))
    assert prefix == "orders/materialized/counts_0"
    view = SharedFilesView(root, prefix, "m-7-ab")
    ref = view.write_bytes("counts/chk-7/MANIFEST", b"manifest")
    sst = view.write_bytes("shared/counts/0a.sst", b"sst")
    assert ref.shared and ref.path == f"{prefix}/m-7-ab/counts/chk-7/MANIFEST"
    assert sst.shared and sst.path == f"{prefix}/shared/counts/0a.sst"
    assert root.read_verified(ref) == view.read_verified(ref) == b"manifest"
    assert view.exists("counts/chk-7/MANIFEST") and view.exists("shared/counts/0a.sst")
    assert list(view.list()) == ["counts/chk-7/MANIFEST"]
    view.delete("counts/chk-7/MANIFEST")
    assert not root.exists(ref.path)
