"""Kafka transactions that ride through a broker outage without breaking exactly-once.

librdkafka's rules, applied in one place for every transactional producer of Tidemark:

- ``init_transactions`` and ``commit_transaction`` failing with a *retriable* error (the broker
  unreachable, a timeout) may be called again: the outcome of the transaction is decided by the
  transaction coordinator, and the retried call returns once it is known;
- an error that *requires an abort* (e.g. the broker aborted the transaction after its
  ``transaction.timeout.ms`` during a long outage) is answered with ``abort_transaction`` (itself
  retried) and the whole transaction is written again: nothing of the aborted one is visible to
  read_committed readers;
- a *fatal* error (the producer was fenced by a newer attempt) is raised: this process is a zombie.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from tidemark.kafka.outage import BrokerWait
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)


def init_transactions(producer: Any, wait: BrokerWait, timeout_s: float = 30.0) -> None:
    """``init_transactions``, waiting through an outage (fences the previous holder of the id)."""
    wait.call("init transactions", lambda: producer.init_transactions(timeout_s))


def run_transaction(producer: Any, write: Callable[[], None], wait: BrokerWait, operation: str,
                    timeout_s: float = 30.0) -> None:
    """``begin_transaction`` -> ``write()`` (produces the transaction's records) -> commit, as
    described in the module docstring; returns once the transaction is committed."""
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
            log.warning("transaction aborted by the broker; writing it again", operation=operation,
                        error=str(error))
        wait.call(f"{operation}: abort", lambda: producer.abort_transaction(timeout_s))
