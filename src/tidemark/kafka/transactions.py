"""Kafka transactions that ride through a broker outage without breaking exactly-once.

librdkafka's rules, applied in one place for every transactional producer of Tidemark:

- ``init_transactions`` and ``commit_transaction`` failing with a *retriable* error (the broker
  unreachable, a timeout) may be called again: the outcome of the transaction is decided by the
  transaction coordinator, and the retried call returns once it is known;
- an error that *requires an abort* (e.g. the broker aborted the transaction after its
  ``transaction.timeout.ms`` during a long outage) is answered with ``abort_transaction`` (itself
  retried) and the whole transaction is written again: nothing of the aborted one is visible to
  read_committed readers;
- the same transaction aborted *again* once written anew (the broker reachable in between, since
  the abort completed) is :class:`TransactionAbortedAgain`: a producer whose records stay
  undelivered while the broker answers does not recover by writing more (seen once: a producer
  started while the embedded broker's partitions had no leader for a second failed every later
  commit with the same records "remaining" for ten minutes, while its peers wrote to the same
  topic). The error ends the worker's attempt; the next attempt's new producer fences this one
  (``init_transactions`` with the same id), and the transaction is written from the last
  completed checkpoint, as after any failure;
- a *fatal* error (the producer was fenced by a newer attempt) is raised: this process is a zombie.

:func:`fence_transactional_ids` retires transactional ids no live process will use again (the
ids of workers that a smaller worker count no longer has): it aborts the transaction each one
may have left open, which would otherwise hold read_committed readers back (their last stable
offset) until the broker aborts it after ``transaction.timeout.ms``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer

from tidemark.kafka.clients import producer_config
from tidemark.kafka.outage import BrokerWait, broker_wait
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)


def init_transactions(producer: Any, wait: BrokerWait, timeout_s: float = 30.0) -> None:
    """``init_transactions``, waiting through an outage (fences the previous holder of the id)."""
    wait.call("init transactions", lambda: producer.init_transactions(timeout_s))


class TransactionsStarting:
    """A new transactional producer's :func:`init_transactions` (after ``before``, what else its
    first transaction needs, such as its topics), on a thread of its own: a worker's start does
    not wait for the transaction coordinator's round trips (about 0.6 s), only its first
    transaction does (:meth:`done`). Fencing is unchanged: the previous holder of the id is fenced
    before this producer writes anything, and nothing reads what the previous one committed before
    it is fenced (a restore's commit markers are read after :meth:`done`)."""

    def __init__(self, producer: Any, wait: BrokerWait, timeout_s: float, name: str,
                 before: Callable[[], None] | None = None) -> None:
        self._error: BaseException | None = None

        def start() -> None:
            try:
                if before is not None:
                    before()
                init_transactions(producer, wait, timeout_s)
            except BaseException as exc:  # raised where the producer is first used
                self._error = exc

        self._thread = threading.Thread(target=start, name=name, daemon=True)
        self._thread.start()

    def done(self) -> None:
        """Once the producer's transactions are initialized; raises what initializing raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error

    def succeeded(self) -> bool:
        """Waits for the start: True when the producer's transactions were initialized."""
        self._thread.join()
        return self._error is None


def fence_transactional_ids(client: Mapping[str, Any], transactional_ids: Iterable[str],
                            wait: BrokerWait | None = None, timeout_s: float = 30.0) -> None:
    """Fence every earlier holder of each id and abort the transaction it left open: per id, a
    throwaway producer runs :func:`init_transactions` (waiting through an outage) and is closed.
    A process still using one of the ids is fenced too (its next transactional call fails
    fatally), so pass only ids that no live process uses."""
    wait = wait or broker_wait(dict(client))
    for transactional_id in transactional_ids:
        producer = Producer(producer_config(dict(client), transactional_id))
        try:
            init_transactions(producer, wait, timeout_s)
            log.info("transactional id fenced", transactional_id=transactional_id)
        finally:
            producer.close()


class TransactionAbortedAgain(RuntimeError):
    """A transaction written again after an abort was aborted again (see the module docstring)."""


def run_transaction(producer: Any, write: Callable[[], None], wait: BrokerWait, operation: str,
                    timeout_s: float = 30.0) -> None:
    """``begin_transaction`` -> ``write()`` (produces the transaction's records) -> commit, as
    described in the module docstring; returns once the transaction is committed."""
    aborted: str | None = None  # the broker's error when the transaction was aborted once already
    while True:
        producer.begin_transaction()
        write()
        try:
            wait.call(f"{operation}: commit", lambda: producer.commit_transaction(timeout_s))
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if error is None or not hasattr(error, "txn_requires_abort") or not error.txn_requires_abort():
                raise
            if aborted is not None:
                raise TransactionAbortedAgain(
                    f"{operation}: the transaction was aborted again after it was written anew ({error}; "
                    f"the first time: {aborted}); this producer is given up") from exc
            aborted = str(error)
            log.warning("transaction aborted by the broker; writing it again", operation=operation,
                        error=aborted)
        wait.call(f"{operation}: abort", lambda: producer.abort_transaction(timeout_s))
