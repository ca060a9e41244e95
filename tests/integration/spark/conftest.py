"""Fixtures for the Spark source and sink tests: one SparkSession per module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="module")
def spark() -> Iterator["SparkSession"]:
    """One local SparkSession per test module, with tidemark-kafka registered and Spark's Kafka
    connector on its classpath (``tidemark.spark.kafka_connector``); stopped after it."""
    from tidemark.jvm import QUICK_START_JVM_OPTIONS
    from tidemark.spark.datasource import register
    from tidemark.spark.kafka_connector import connector_jars
    from tidemark.spark.session import SessionOptions, spark_session

    jars = ",".join(str(jar) for jar in connector_jars())
    session = spark_session(SessionOptions(java_options=QUICK_START_JVM_OPTIONS, extra_conf={"spark.jars": jars}))
    register(session)
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
