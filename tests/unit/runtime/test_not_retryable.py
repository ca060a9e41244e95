"""Which failures a restart will not fix, and the one line the supervisor prints for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.config.settings import ConfigurationError
from tidemark.api import JobSpecError
from tidemark.runtime.job.start_errors import (
    MissingInputTopic,
    failed_file,
    missing_topics_reason,
    not_retryable_reason,
)
from tidemark.kafka.metadata import TopicNotFoundError
from tidemark.state import StateMigrationError

# what a Python data source error looks like after Spark and Py4J wrapped it (shortened)
SPARK_TEXT = """An error occurred while calling o47.start.
: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/main/src/tidemark/spark/kafka_source.py", line 88, in schema
    partitions = list_partitions(consumer, topics)
  File "/work/main/src/tidemark/spark/offset_planning.py", line 44, in list_partitions
tidemark.spark.offset_planning.TopicNotFoundError: tidemark-kafka option 'subscribe': topic(s) not found: ['access-log']
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:572)
\tat org.apache.spark.sql.execution.python.PythonDataSource.schema(PythonDataSource.scala:90)
"""


def test_a_missing_topic_gives_the_root_message_from_our_error_and_from_a_spark_stack() -> None:
    ours = TopicNotFoundError("tidemark-kafka option 'subscribe': topic(s) not found: ['access-log']")
    expected = "input topic 'access-log' does not exist (create it; a job creates only its channel and output topics)"
    assert not_retryable_reason(ours) == expected
    assert not_retryable_reason(RuntimeError(SPARK_TEXT)) == expected
    assert missing_topics_reason(["a", "b"]).startswith("input topics 'a', 'b' do not exist")


@pytest.mark.parametrize("error, reason", [
    (JobSpecError("cannot import 'acme_jobs.orders': No module named 'acme_jobs'"),
     "cannot import 'acme_jobs.orders': No module named 'acme_jobs'"),
    (MissingInputTopic("input topic 'x' does not exist"), "input topic 'x' does not exist"),
    (StateMigrationError("state 'visits' cannot be restored: its serializer changed from avro.binary.v1 to "
                         "tidemark.tagged.v1"),
     "state 'visits' cannot be restored: its serializer changed from avro.binary.v1 to tidemark.tagged.v1"),
    (RuntimeError("PythonException: ...\ntidemark.state.schema_evolution.StateMigrationError: state 'v' cannot be "
                  "restored: TTL was turned on (the stored values' layout differs)\n\tat org.apache.spark"),
     "state 'v' cannot be restored: TTL was turned on (the stored values' layout differs)"),
    (ConfigurationError([("TIDEMARK_HTTP_PORT", "Input should be a valid integer")]), None),
])
def test_bad_job_references_arguments_and_configuration_are_not_retryable(error: Exception, reason: str | None) -> None:
    found = not_retryable_reason(error)
    assert found is not None and "\n" not in found
    if reason is not None:
        assert found == reason
    else:
        assert "TIDEMARK_HTTP_PORT" in found


@pytest.mark.parametrize("error", [
    RuntimeError("stage agg query stopped: java.lang.OutOfMemoryError: Java heap space"),
    ValueError("a state key must be str, bytes or int, not float"),
    ConnectionError("broker transport failure"),
    TopicNotFoundError("changelog topic p.changelog.j.agg was not created within 120s: is the changelog service "
                       "running?"),
])
def test_everything_else_is_retried(error: Exception) -> None:
    assert not_retryable_reason(error) is None


def test_the_failed_file_is_per_stage_and_epoch(tmp_path: Path) -> None:
    assert failed_file(tmp_path, "agg", 7) == tmp_path / "agg.epoch-7.failed"
