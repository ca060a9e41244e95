"""One active instance of each service: a newer instance fences the older one.

Lifecycle: ``ServiceApp.run`` calls :meth:`SingletonLease.claim` before the service does anything
(no reader, no timer, no HTTP port yet), then :meth:`SingletonLease.watch` for the life of the
process; the service acts (handles live records, runs timers' work, says it is ready) only from
:attr:`SingletonLease.acting_from` on.

Mechanism (Kafka transactional-id fencing plus a lease log):

1. ``claim`` opens a transactional producer with the id ``<prefix>.lease.<service>``.
   ``init_transactions`` bumps the producer epoch at the broker, which fences the older instance's
   producer: a claim it has not committed yet fails.
2. It commits a claim record (key: the service name; value: instance id, host, pid, time) to the
   compacted ``<prefix>.leases`` topic. The claim's offset orders instances: the latest claim of a
   service is the active instance.
3. It then lets ``grace_s`` (several watch periods) pass before it acts (``acting_from``), so
   that the older instance has read the claim and exited by then. Reading is not acting: the
   instance replays its logs meanwhile. The grace is owed only to an older instance that may
   still run: a claim records its process's whereabouts, and one provably gone (it ran on this
   kernel, in this pid namespace, and its process is dead) is owed nothing
   (:mod:`tidemark.chassis.predecessors`, from the earlier claims read back after the commit).
4. ``watch`` reads the lease topic (read_committed) from the instance's own claim on, every
   ``poll_s``. A newer claim of the same service by another instance fences this one: it logs
   ``fenced: a newer <service> instance took over`` and exits at once with :data:`EXIT_FENCED`
   (``os._exit``: no handler, timer or flush runs after that line).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition

from tidemark.chassis.predecessors import grace_owed, here
from tidemark.clock import now_ms
from tidemark.exit_codes import EXIT_FENCED
from tidemark.kafka.clients import consumer_config, producer_config
from tidemark.kafka.topics import TopicSpec
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
LEASE_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": str(3600 * 1000)}


def lease_topic(prefix: str) -> TopicSpec:
    """The compacted topic holding each service's latest claim."""
    return TopicSpec(f"{prefix}.leases", 1, LEASE_CONFIG)


class SingletonLease:
    """Claims ``service`` for this process and exits the process when another instance claims it."""

    def __init__(self, service: str, client: dict[str, Any], prefix: str, *,
                 poll_s: float = 0.2, grace_s: float = 1.5) -> None:
        self.service = service
        self.topic = lease_topic(prefix).name
        self.instance = uuid.uuid4().hex
        self.poll_s = poll_s
        self.grace_s = grace_s
        self._client = client
        self._transactional_id = f"{prefix}.lease.{service}"
        self._claim_offset: int | None = None
        self._producer: Producer | None = None
        self.acting_from: float | None = None  # monotonic: the end of the grace period, once claimed

    def claim(self, timeout_s: float = 60.0) -> int:
        """Fence older instances and record this one as the active instance; returns the offset of
        the claim once it is committed, and sets :attr:`acting_from` (``grace_s`` after the
        commit, or the commit itself when no older instance may still run): the instance acts
        from then on, not before."""
        producer = Producer(producer_config(self._client, self._transactional_id))
        producer.init_transactions(timeout_s)
        me = here()
        claim = {"service": self.service, "instance": self.instance, "host": socket.gethostname(),
                 **me.fields(), "claimed_at": now_ms()}
        offsets: list[int] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                offsets.append(msg.offset())

        producer.begin_transaction()
        producer.produce(self.topic, key=self.service.encode(), value=json.dumps(claim).encode(),
                         on_delivery=delivered)
        producer.commit_transaction(timeout_s)  # raises if a newer instance fenced this claim
        producer.poll(0)
        if not offsets:
            raise RuntimeError(f"claim of {self.service} was not acknowledged")
        self._producer = producer  # kept open: its epoch is this instance's
        self._claim_offset = offsets[0]
        committed = time.monotonic()
        owed = grace_owed(self._earlier_claims(), now_ms(), round(self.grace_s * 1000), me)
        self.acting_from = committed + (self.grace_s if owed else 0.0)
        log.info("singleton claimed", service=self.service, instance=self.instance, topic=self.topic,
                 offset=self._claim_offset, grace_s=self.grace_s if owed else 0.0)
        return self._claim_offset

    def _earlier_claims(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """This service's claims before this instance's, oldest first (as far as compaction kept
        them). Unreadable in ``timeout_s``: none, so the whole grace period is owed."""
        assert self._claim_offset is not None
        consumer = Consumer(consumer_config(self._client, None))
        claims: list[dict[str, Any]] = []
        try:
            low, _ = consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=timeout_s)
            consumer.assign([TopicPartition(self.topic, 0, low)])  # an explicit offset is read at once
            deadline = time.monotonic() + timeout_s
            while low < self._claim_offset and time.monotonic() < deadline:
                record = consumer.poll(0.2)
                if record is None or record.error() is not None:
                    continue
                if record.offset() >= self._claim_offset:
                    return claims
                claim = self.newer_claim(record.key(), record.value())
                if claim is not None:
                    claims.append(claim)
            if low >= self._claim_offset:
                return claims
            log.warning("earlier lease claims not read in time; waiting the whole grace period",
                        service=self.service, timeout_s=timeout_s)
            return []
        except KafkaException as exc:
            log.warning("earlier lease claims not readable; waiting the whole grace period",
                        service=self.service, error=str(exc))
            return []
        finally:
            consumer.close()

    def watch(self) -> threading.Thread:
        """Start the daemon thread that fences this process on a newer claim."""
        if self._claim_offset is None:
            raise RuntimeError("claim() first")
        thread = threading.Thread(target=self._watch, name=f"lease-{self.service}", daemon=True)
        thread.start()
        return thread

    def newer_claim(self, record_key: bytes | None, record_value: bytes | None) -> dict[str, Any] | None:
        """The claim in a lease record when it is another instance's claim of this service."""
        if record_key != self.service.encode() or not record_value:
            return None
        try:
            claim = json.loads(record_value)
        except ValueError:
            return None
        if not isinstance(claim, dict) or claim.get("instance") == self.instance:
            return None
        return claim

    def _watch(self) -> None:
        consumer = Consumer(consumer_config(self._client, None))
        consumer.assign([TopicPartition(self.topic, 0, self._claim_offset + 1 if self._claim_offset is not None
                                        else OFFSET_END)])
        while True:
            try:
                record = consumer.poll(self.poll_s)
            except KafkaException:  # broker outage: keep acting until a newer claim is seen
                continue
            if record is None or record.error():
                continue
            claim = self.newer_claim(record.key(), record.value())
            if claim is not None:
                self.fence(claim)

    def fence(self, claim: dict[str, Any]) -> None:
        """Stop acting at once: log why and exit with :data:`EXIT_FENCED`."""
        log.error(f"fenced: a newer {self.service} instance took over; exiting", service=self.service,
                  instance=self.instance, by_instance=claim.get("instance"), by_host=claim.get("host"),
                  by_pid=claim.get("pid"), exit_code=EXIT_FENCED)
        os._exit(EXIT_FENCED)
