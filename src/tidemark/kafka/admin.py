"""Admin operations: idempotent topic creation and log truncation (DeleteRecords)."""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import tenacity
from confluent_kafka import KafkaError, KafkaException, TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.kafka.topics import TopicSpec
from tidemark.types import TopicPartition


class TruncationResult(str, enum.Enum):
    PHYSICAL = "physical"  # the broker moved the log start offset
    UNSUPPORTED = "unsupported"  # the broker does not implement DeleteRecords


def ensure_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], replication_factor: int = 1, timeout_s: float = 15.0,
    listed_within_s: float = 60.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created. Returns once every topic
    of ``specs`` shows in the broker's metadata: Apache Kafka lists a new topic a moment after
    CreateTopics answers, and a worker that looks it up at once must find it. That moment is the
    controller's metadata reaching the broker, which a busy machine stretches to many seconds, so
    the wait for it (``listed_within_s``) is longer than one request's ``timeout_s``. A creation
    the broker refuses for a passing state (fenced, not available, timed out) is tried again
    within the same ``listed_within_s``."""
    specs = list(specs)
    deadline = time.monotonic() + listed_within_s
    existing = set(_listed(admin, timeout_s, deadline).topics)
    wanted = [
        NewTopic(spec.name, num_partitions=spec.partitions, replication_factor=replication_factor,
                 config=dict(spec.config))
        for spec in specs
        if spec.name not in existing
    ]
    if not wanted:
        return []
    created = _create(admin, wanted, timeout_s, deadline)
    _wait_until_listed(admin, [topic.topic for topic in wanted], timeout_s, listed_within_s)
    return created


def _listed(admin: AdminClient, timeout_s: float, deadline: float) -> Any:
    """The broker's topic metadata, asked again while it times out until ``deadline``."""
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(_passing_failure), wait=tenacity.wait_fixed(0.5),
        stop=lambda _: time.monotonic() > deadline, reraise=True,
    )(admin.list_topics, timeout=timeout_s)


def _create(admin: AdminClient, wanted: list[NewTopic], timeout_s: float, deadline: float) -> list[str]:
    """CreateTopics, again for the topics a passing state of the broker refused or left unanswered
    until ``deadline``: a single-node KRaft broker that missed its heartbeats under load is fenced
    for a moment, and then refuses every new topic ("All brokers are currently fenced"), and its
    overloaded controller may answer after the request's timeout (a topic created meanwhile
    answers TOPIC_ALREADY_EXISTS the next time)."""
    created: list[str] = []
    while wanted:
        refused = _create_once(admin, wanted, timeout_s, deadline, created)
        wanted = [topic for topic in wanted if topic.topic in refused]
        if wanted:
            time.sleep(0.5)
    return created


def _create_once(admin: AdminClient, wanted: list[NewTopic], timeout_s: float, deadline: float,
                 created: list[str]) -> list[str]:
    """One CreateTopics of ``wanted``: adds the names created to ``created``, returns those refused
    for a passing state before ``deadline`` and raises any other refusal."""
    refused = []
    for name, future in admin.create_topics(wanted, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
            created.append(name)
        except FutureTimeout:
            if time.monotonic() > deadline:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"creating topic {name}: the broker did "
                                                f"not answer within {timeout_s:g}s until the deadline")) from None
            refused.append(name)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if not _passing(error) or time.monotonic() > deadline:
                raise
            refused.append(name)
    return refused


def _passing_failure(exc: BaseException) -> bool:
    return isinstance(exc, KafkaException) and _passing(exc.args[0])


def _passing(error: KafkaError) -> bool:
    """Whether CreateTopics failed for a state of the broker that passes by itself."""
    if error.code() == KafkaError.INVALID_REPLICATION_FACTOR:  # also "only N brokers", which stays
        return "fenced" in error.str()
    return error.code() in (KafkaError.BROKER_NOT_AVAILABLE, KafkaError.NOT_CONTROLLER,
                            KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TRANSPORT)


def _wait_until_listed(admin: AdminClient, topics: list[str], timeout_s: float, listed_within_s: float) -> None:
    deadline = time.monotonic() + listed_within_s
    for topic in topics:  # named one by one: each was just created, so naming it creates nothing
        while True:
            meta = admin.list_topics(topic, timeout=timeout_s).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                break
            if time.monotonic() > deadline:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"topic {topic} not listed {listed_within_s:g}s "
                                                "after it was created"))
            time.sleep(0.1)


def delete_records_before(
    admin: AdminClient, offsets: dict[TopicPartition, int], timeout_s: float = 10.0
) -> TruncationResult:
    """Ask the broker to drop every record before ``offsets`` (DeleteRecords).

    Returns UNSUPPORTED, instead of raising, when the broker does not implement the request
    (Tansu closes the connection); any other failure raises KafkaException.
    """
    partitions = [KafkaTopicPartition(topic, part, off) for (topic, part), off in offsets.items()]
    if not partitions:
        return TruncationResult.PHYSICAL
    try:
        futures: dict[Any, Any] = admin.delete_records(partitions, request_timeout=timeout_s,
                                                        operation_timeout=timeout_s)
        for future in futures.values():
            future.result(timeout=timeout_s + 5)
    except KafkaException as exc:
        error = exc.args[0]
        unsupported = {KafkaError._TRANSPORT, KafkaError.UNSUPPORTED_VERSION,
                       KafkaError._UNSUPPORTED_FEATURE, KafkaError._TIMED_OUT}
        if isinstance(error, KafkaError) and error.code() in unsupported:
            return TruncationResult.UNSUPPORTED
        raise
    return TruncationResult.PHYSICAL
