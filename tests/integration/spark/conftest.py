"""Fixtures for the tidemark-kafka tests: a broker probe for aborted-transaction filtering."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from kafka_test_helpers import committed_values, create_topic, produce_transaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def broker_hides_aborted(kafka_bootstrap: str) -> bool:
    """Does a read_committed consumer skip records of aborted transactions on this broker?

    Apache Kafka: yes. The embedded broker (Tansu 0.6.0) sends no aborted-transaction list in
    Fetch responses, so aborted records that reached it are returned to read_committed readers.
    """
    topic = f"probe-aborted-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, 1)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"aborted", None)], commit=False)
    produce_transaction(kafka_bootstrap, topic, [(0, None, b"committed", None)])
    return committed_values(kafka_bootstrap, topic, 1) == [b"committed"]


@pytest.fixture
def require_aborted_filtering(request: pytest.FixtureRequest, broker_hides_aborted: bool) -> Iterator[None]:
    """The test runs either way; on a broker without aborted filtering it must fail (strict xfail)."""
    if not broker_hides_aborted:
        request.node.add_marker(pytest.mark.xfail(
            strict=True,
            reason="broker returns aborted transactional records to read_committed consumers "
                   "(embedded Tansu 0.6.0 sends no AbortedTransactions in Fetch); passes on Apache Kafka"))
    yield


@pytest.fixture(scope="module")
def spark() -> Iterator["SparkSession"]:
    """One local SparkSession per test module, with tidemark-kafka registered; stopped after it."""
    from tidemark.spark.session import local_session

    session = local_session()
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()
        session.stop()
