"""The keyed-backend contract suite: every test here runs against every backend (heap, RocksDB,
and the changelog backend over an in-memory changelog; see ``tests/unit/state/conftest.py``)."""

from __future__ import annotations

import pytest

BACKENDS = ["heap", "rocksdb", "changelog"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "new_backend" in metafunc.fixturenames:
        metafunc.parametrize("new_backend", BACKENDS, indirect=True)
