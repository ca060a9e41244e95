"""Fixtures for the tidemark-kafka tests: one SparkSession per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def spark() -> Iterator["SparkSession"]:
    """One local SparkSession per test module, with tidemark-kafka registered; stopped after it."""
    from tidemark.jvm import QUICK_START_JVM_OPTIONS
    from tidemark.spark.session import LocalSessionOptions, local_session

    session = local_session(LocalSessionOptions(java_options=QUICK_START_JVM_OPTIONS))
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
