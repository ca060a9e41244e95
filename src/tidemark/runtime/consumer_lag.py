"""A stage's consumer lag: how far its positions are behind the end of each input partition.

``ConsumerLag.report(positions)`` (every ``REPORT_EVERY_S``) updates ``tidemark_worker_consumer_lag``
from the partitions' high watermarks. A metric never takes the worker down: when the broker cannot
answer, the gauges keep their last values and the outage is reported (once per distinct error
otherwise).

``ConsumerLag.unread(positions)`` answers the question event-time idleness depends on: which
partitions still hold records this worker has not read. The answer is only as good as the last
report, so it is *unknown* (None, and then no partition may go idle) before the first report,
after a report that got no answer (a broker going away first answers "unknown partition"), when
the last one is older than ``STALE_AFTER_S`` and while the process is waiting for the broker.
A broker that stops answering must not make a partition with a backlog look caught up: its
records would be dropped as late when the broker comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tidemark.kafka.metadata import list_partitions, watermarks
from tidemark.kafka.outage import broker_wait, unavailable
from tidemark.runtime.metrics import CONSUMER_LAG
from tidemark.chassis.logs import get_logger
from tidemark.types import JobId, TopicPartitionKey

log = get_logger(__name__)
REPORT_EVERY_S = 2.0
STALE_AFTER_S = 2 * REPORT_EVERY_S + 1.0  # two reports missed: the end offsets are not known any more


def unread_partitions(ends: Mapping[TopicPartitionKey, int],
                      positions: Mapping[TopicPartitionKey, int]) -> set[TopicPartitionKey]:
    """The partitions whose end is beyond the position (one offset is allowed for the marker that
    ends a transaction)."""
    return {p for p, end in ends.items() if end - positions.get(p, 0) > 1}


class ConsumerLag:
    def __init__(self, client: dict[str, Any], metadata: Any, job: JobId, stage: str, inputs: Sequence[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.metadata = metadata  # a metadata consumer the worker owns
        self.job = job
        self.stage = stage
        self.inputs = list(inputs)
        self._clock = clock
        self._wait = broker_wait(client)  # the process's outage state for this broker
        self._error: str | None = None
        self._ends: dict[TopicPartitionKey, int] | None = None  # each read partition's end, at the last answer
        self._ends_at = 0.0

    def report(self, positions: Mapping[TopicPartitionKey, int],
               reads: Sequence[TopicPartitionKey] | None = None) -> None:
        """``reads``: the partitions this worker reads (all of the inputs' by default)."""
        try:
            marks = watermarks(self.metadata, list(reads) if reads else list_partitions(self.metadata, self.inputs))
        except Exception as exc:
            self._ends = None  # no answer: what is left to read is not known until the next one
            if unavailable(exc):
                self._wait.failed("consumer lag", exc)
            elif str(exc) != self._error:
                log.warning("consumer lag not measured", job=self.job, stage=self.stage, error=str(exc))
            self._error = str(exc)
            return
        self._error = None
        for (topic, partition), (_, high) in marks.items():
            CONSUMER_LAG.labels(self.job, topic, str(partition)).set(max(0, high - positions.get((topic, partition), 0)))
        self._ends = {position: high for position, (_, high) in marks.items()}
        self._ends_at = self._clock()

    def unread(self, positions: Mapping[TopicPartitionKey, int]) -> set[TopicPartitionKey] | None:
        """The partitions with records not read yet, by the last report; None when that is not
        known (see the module docstring)."""
        if (self._ends is None or self._clock() - self._ends_at > STALE_AFTER_S
                or self._wait.waiting):
            return None
        return unread_partitions(self._ends, positions)
