"""Per-record failures of a stage: the stage's error policy, applied to one record at a time.

A record fails when its Tidemark headers are malformed (:mod:`tidemark.runtime.job.records`), when
``Stage.decode`` or ``Stage.key_by`` raises, when its key cannot be routed (a key that is not a
``str``/``bytes``/64-bit ``int``, or a string with lone surrogates that has no UTF-8 bytes), when
a co-partitioned input's record is not in its key's partition (:class:`NotCoPartitioned`), when a
Spark step leaves a required column of its row null (:class:`RejectedBySparkStep`), or
when the user function's ``process`` raises. None of these may take the job down by default:
``Stage.on_error`` (:class:`~tidemark.api.ErrorPolicy`) decides.

* ``dead-letter`` (default): the record goes to ``<prefix>.dead-letters`` as a ``DeadLetter``
  with its origin (topic, partition, offset, timestamp), key, value, headers and the error,
  cut to fit the broker's message size (:mod:`tidemark.chassis.dead_letter_publisher`); counted in
  ``tidemark_dead_letters_total{service="worker"}`` and ``tidemark_worker_records_skipped_total``.
* ``skip``: counted in ``tidemark_worker_records_skipped_total`` and logged, nothing published.
* ``fail``: :class:`RecordFailed` is raised; the attempt dies and the supervisor restores it.

A failed record emits nothing: outputs of a ``process`` call that raised are dropped. State it
changed before raising stays changed (the function should validate before it updates state).
Dead letters are written at least once: a record reprocessed after a restore is dead-lettered
again.
"""

from __future__ import annotations

from confluent_kafka import Producer

from tidemark.kafka.clients import producer_config
from tidemark.kafka.topics import TopicNames
from tidemark.protocol import codec
from tidemark.protocol.errors import DecodeError
from tidemark.api import ErrorPolicy
from tidemark.runtime.job.metrics import RECORDS_SKIPPED
from tidemark.runtime.job.records import InputRecord
from tidemark.chassis.dead_letter_publisher import ProcessingError, RawRecord, error_text, reason_of, record_failure
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
SERVICE = "worker"


class MalformedInput(DecodeError):
    """``decode`` or ``key_by`` raised, or the key cannot be routed."""

    reason = "malformed-input"


class MalformedHeaders(DecodeError):
    """A Tidemark header of the record is malformed, or a channel record lacks them."""

    reason = "malformed-headers"


class NotCoPartitioned(DecodeError):
    """A record of an input declared co-partitioned, read directly, whose key group this worker
    does not own: its producer did not put it into its key's partition."""

    reason = "not-co-partitioned"


class RejectedBySparkStep(DecodeError):
    """The stage's Spark step gave the record no value in a required column (``from_json`` could
    not parse it, for instance): dead-lettered with its original bytes."""

    reason = "spark-step-rejected"


class FunctionFailed(ProcessingError):
    """The stage's user function raised while processing the record."""

    reason = "function-failed"


class RecordFailed(RuntimeError):
    """A record failed under the ``fail`` policy: the attempt stops."""


class RecordFailures:
    """Applies one stage's error policy; owns the dead-letter producer of the worker."""

    def __init__(self, client: dict[str, object], topics: TopicNames, job: str, policy: ErrorPolicy,
                 max_bytes: int) -> None:
        self.topics = topics
        self.job = job
        self.policy = policy
        self.max_bytes = max_bytes
        self.failed = 0
        self._producer = Producer(producer_config(client, **{"message.max.bytes": max(max_bytes, 1000)}))

    def record_failed(self, record: InputRecord, error: BaseException) -> None:
        reason = reason_of(error)
        origin = f"{record.topic}/{record.partition}@{record.offset}"
        if self.policy is ErrorPolicy.FAIL:
            raise RecordFailed(f"{origin}: {reason}: {error_text(error, 500)} (error policy 'fail')") from error
        self.failed += 1
        RECORDS_SKIPPED.labels(self.job, record.topic, reason).inc()
        if self.policy is ErrorPolicy.SKIP:
            log.warning("record skipped", job=self.job, topic=record.topic, partition=record.partition,
                        offset=record.offset, reason=reason, error=error_text(error, 500))
            return
        raw = RawRecord(record.topic, record.partition, record.offset, record.timestamp_ms, record.key,
                        record.value, record.raw_headers())
        letter = record_failure(raw, error, SERVICE, self.max_bytes)
        self._producer.produce(self.topics.dead_letters, key=letter.key, value=codec.encode(letter))
        self._producer.poll(0)

    def close(self) -> None:
        self._producer.flush(10)
