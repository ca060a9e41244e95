"""Riding through a broker outage: the one place where a Tidemark process waits for Kafka.

A Kafka operation that fails because the broker cannot be reached (connection refused, all
brokers down, a request timed out, any retriable error) is no reason for a process to exit: the
broker comes back, and what needs it waits and tries again. Every process kind uses this module:

- :func:`unavailable` tells such errors (confluent-kafka's and aiokafka's) from real ones;
- :class:`BrokerWait` (one per bootstrap address in a process: :func:`broker_wait`) is where an
  outage is recorded and reported: the first failure of an outage logs ``waiting for the broker``
  (with the bootstrap address and the operation that failed), again every ``LOG_EVERY_S`` while it
  lasts, and the first success afterwards logs ``broker is back`` with the outage's duration;
  ``outages`` counts them, so a reader of the broker's answers (the consumer lag) tells when
  one came between two answers, even one that began and ended unseen by it;
- :meth:`BrokerWait.call` runs an operation, retrying it while the broker is unavailable, for up
  to ``patience_s`` (then the last error is raised: an outage that long is a failure); a partition
  the client does not know yet (a topic created a moment ago, before the client's metadata has
  it: librdkafka's ``_UNKNOWN_PARTITION``) is waited for too, for up to ``SETTLE_S`` (not an outage);
- :meth:`BrokerWait.deliver` flushes a producer until every record is delivered;
- :class:`BrokerWatch` probes the broker every few seconds from a daemon thread, so a process that
  makes no Kafka call during an outage (the supervisor, an idle service) reports it too.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import tenacity
from confluent_kafka import Consumer, KafkaError, KafkaException

from tidemark.kafka.clients import consumer_config
from tidemark.kafka.metadata import brokers_listed
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
T = TypeVar("T")

LOG_EVERY_S = 10.0
PATIENCE_S = 300.0  # how long an operation waits for the broker before its error is raised
RETRY_S = 1.0
PROBE_EVERY_S = 2.0
PROBE_TIMEOUT_S = 4.0
SETTLE_S = 20.0  # how long an operation waits for a partition its client does not know yet

# a partition or topic the client's metadata does not have yet: one created a moment ago (every
# operation on a partition runs after the topic was created or listed, so a real absence is rare
# and still raised, after SETTLE_S)
_SETTLING_CODES = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                             KafkaError.UNKNOWN_TOPIC_OR_PART})

_UNAVAILABLE_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE,
    KafkaError._MSG_TIMED_OUT, KafkaError._WAIT_COORD, KafkaError._RESOLVE, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
    KafkaError._DESTROY_BROKER,  # a request on a connection the restarted broker's client tore down
})


class BrokerUnavailableError(RuntimeError):
    """An operation could not reach the broker (raised by Tidemark's own checks, e.g. a flush that
    delivered nothing); :func:`unavailable` counts it as an outage."""


def _settling(error: BaseException | None) -> bool:
    """True when ``error`` names a partition or topic the client does not know yet (see _SETTLING_CODES)."""
    return (isinstance(error, KafkaException) and bool(error.args) and isinstance(error.args[0], KafkaError)
            and error.args[0].code() in _SETTLING_CODES)


def unavailable(error: BaseException | KafkaError | None) -> bool:
    """True when ``error`` means the broker could not be reached or asked to retry later."""
    if error is None:
        return False
    if isinstance(error, BrokerUnavailableError):
        return True
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        if error.fatal() or error.txn_requires_abort():
            return False
        return error.code() in _UNAVAILABLE_CODES or error.retriable()
    if isinstance(error, TimeoutError):  # asyncio's too
        return True
    return bool(getattr(error, "retriable", False))  # aiokafka's errors carry the flag


class DeliveryFailed(RuntimeError):
    """The broker refused a record (not an outage: those are waited through)."""


class BrokerWait:
    """The outage state of one bootstrap address in this process (see the module docstring).
    Thread-safe: every client of the process reports into the same instance."""

    def __init__(self, bootstrap: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.bootstrap = bootstrap
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None  # start of the current outage
        self._logged = 0.0
        self.outages = 0  # outages begun so far: a reader of the broker's answers sees one came between two

    @property
    def waiting(self) -> bool:
        return self._since is not None

    def failed(self, operation: str, error: object) -> None:
        """An operation could not reach the broker: log it (first time and every LOG_EVERY_S)."""
        now = self._clock()
        with self._lock:
            first = self._since is None
            if first:
                self._since = now
                self.outages += 1
            elif now - self._logged < LOG_EVERY_S:
                return
            self._logged = now
            waited = now - (self._since or now)
        log.warning("waiting for the broker", bootstrap=self.bootstrap, operation=operation,
                    error=str(error), waited_s=round(waited, 1))

    def succeeded(self) -> None:
        """An operation reached the broker: log the end of the outage, if there was one."""
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.info("broker is back", bootstrap=self.bootstrap, outage_s=round(self._clock() - since, 1))

    def call(self, operation: str, fn: Callable[[], T], *, patience_s: float = PATIENCE_S) -> T:
        """``fn()``, retried every ``RETRY_S`` while it fails with an :func:`unavailable` error,
        for up to ``patience_s``, or with a partition its client does not know yet, for up to
        ``SETTLE_S``; other errors, and the last one after that, are raised."""
        started = self._clock()
        deadline = started + patience_s
        settled_by = started + min(SETTLE_S, patience_s)

        def retried(error: BaseException) -> bool:
            return unavailable(error) or (_settling(error) and self._clock() <= settled_by)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            error = state.outcome and state.outcome.exception()
            if unavailable(error):
                self.failed(operation, error)
            else:
                log.debug("waiting for a partition the client does not know yet", operation=operation,
                          error=str(error))

        result: T = tenacity.Retrying(
            retry=tenacity.retry_if_exception(retried), wait=tenacity.wait_fixed(RETRY_S),
            stop=lambda _: self._clock() > deadline, reraise=True, before_sleep=before_sleep,
        )(fn)
        self.succeeded()
        return result

    def deliver(self, producer: Any, operation: str, *, patience_s: float = PATIENCE_S) -> None:
        """Flush ``producer`` until nothing is queued or in flight, waiting through an outage
        (librdkafka keeps retrying each record until its ``delivery.timeout.ms``)."""
        deadline = self._clock() + patience_s
        while (remaining := producer.flush(RETRY_S * 5)) > 0:
            if self._clock() > deadline:
                raise BrokerUnavailableError(f"{operation}: {remaining} record(s) not delivered within "
                                             f"{patience_s:g}s to {self.bootstrap}")
            self.failed(operation, f"{remaining} record(s) not delivered yet")
        self.succeeded()

    def deliver_records(self, producer: Any, topic: str, records: Iterable[tuple[bytes | None, bytes]],
                        operation: str, *, partition: int | None = None, patience_s: float = PATIENCE_S) -> None:
        """Produce ``records`` (key, value) to ``topic`` and return once every one is delivered,
        waiting through an outage (:meth:`deliver`); a record the broker refused raises
        :class:`DeliveryFailed` naming the first error."""
        failures: list[str] = []

        def delivered(error: Any, record: Any) -> None:
            if error is not None:
                failures.append(str(error))

        extra = {} if partition is None else {"partition": partition}
        for key, value in records:
            producer.produce(topic, key=key, value=value, on_delivery=delivered, **extra)
        self.deliver(producer, operation, patience_s=patience_s)
        if failures:
            raise DeliveryFailed(f"{operation}: {len(failures)} record(s) not delivered to {topic}: {failures[0]}")


_WAITS: dict[str, BrokerWait] = {}
_WAITS_LOCK = threading.Lock()


def broker_wait(config_or_bootstrap: dict[str, Any] | str) -> BrokerWait:
    """This process's :class:`BrokerWait` for a bootstrap address (or a client config naming one)."""
    bootstrap = (config_or_bootstrap if isinstance(config_or_bootstrap, str)
                 else str(config_or_bootstrap["bootstrap.servers"]))
    with _WAITS_LOCK:
        if bootstrap not in _WAITS:
            _WAITS[bootstrap] = BrokerWait(bootstrap)
        return _WAITS[bootstrap]


class BrokerWatch:
    """Probes the broker (a Metadata request naming one topic) every ``PROBE_EVERY_S`` on a daemon thread and
    reports each result to the process's :class:`BrokerWait`.

    Lifecycle: ``BrokerWatch(config)`` -> ``start()`` -> ``stop()`` (or let the process end)."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = dict(config)
        self.wait = broker_wait(config)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> BrokerWatch:
        context = contextvars.copy_context()  # the process's bound log fields (service=...)
        self._thread = threading.Thread(target=context.run, args=(self._run,), name="broker-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        probe = Consumer(consumer_config(self._config, None))
        while not self._stop.wait(PROBE_EVERY_S):
            try:
                if not brokers_listed(probe, PROBE_TIMEOUT_S):
                    raise BrokerUnavailableError("the broker lists no brokers")
            except Exception as exc:
                if unavailable(exc):
                    self.wait.failed("probe", exc)
                continue
            self.wait.succeeded()

    def stop(self) -> None:
        self._stop.set()
