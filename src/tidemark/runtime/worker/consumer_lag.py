"""A stage's consumer lag: how far its positions are behind the end of each input partition.

``ConsumerLag.report(positions)`` (every ``REPORT_EVERY_S``) updates ``tidemark_worker_consumer_lag``
from the partitions' high watermarks. A metric never takes the worker down: when the broker cannot
answer, the gauges keep their last values and the outage is reported (once per distinct error
otherwise).

``ConsumerLag.unread(positions)`` answers the question event-time idleness depends on
(:class:`~tidemark.runtime.worker.watermarks.Unread`): which partitions still hold records this worker
has not read, when the end offsets were asked, and since when the broker has answered without a
break. The answer is only as good as the last report, so it is *unknown* (None, and then no
partition may go idle) before the first report, after a report that got no answer (a broker
going away first answers "unknown partition"), when the last one is older than
``STALE_AFTER_S``, while the process is waiting for the broker and after an outage until the
broker answers again. The unbroken answers start anew with an answer that follows any of those,
one more than ``STALE_AFTER_S`` after the answer before, or one that took longer than
``REPORT_EVERY_S`` (a broker that stalled while it was asked). A broker that stops answering must
not make a partition with a backlog look caught up, nor its silence look like idleness: its
records would be dropped as late when the broker comes back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidemark.kafka.metadata import list_partitions, watermarks
from tidemark.kafka.outage import broker_wait, unavailable
from tidemark.runtime.job.metrics import CONSUMER_LAG
from tidemark.runtime.worker.watermarks import Unread
from tidemark.chassis.logs import get_logger
from tidemark.types import JobId, TopicPartition

log = get_logger(__name__)
REPORT_EVERY_S = 2.0
STALE_AFTER_S = 2 * REPORT_EVERY_S + 1.0  # two reports missed: the end offsets are not known any more


def unread_partitions(ends: Mapping[TopicPartition, int],
                      positions: Mapping[TopicPartition, int]) -> set[TopicPartition]:
    """The partitions whose end is beyond the position (one offset is allowed for the marker that
    ends a transaction)."""
    return {p for p, end in ends.items() if end - positions.get(p, 0) > 1}


@dataclass(frozen=True, slots=True)
class _Answer:
    ends: dict[TopicPartition, int]
    asked: float
    answered: float
    answering_since: float
    outages: int  # the process's outages begun by then (BrokerWait.outages)


class EndOffsets:
    """The broker's answers about the ends of a worker's partitions (pure: answers, the clock
    and the process's outage state in; seconds of a monotonic clock). Lifecycle: ``answered``
    or ``failed`` after each report, ``unread`` at any time from any thread."""

    def __init__(self) -> None:
        self._last: _Answer | None = None  # replaced whole: read by the batch thread

    def answered(self, ends: Mapping[TopicPartition, int], asked: float, answered: float, outages: int) -> None:
        """The ends, asked at ``asked``, came at ``answered``; ``outages``: BrokerWait.outages."""
        last, since = self._last, answered
        if (last is not None and last.outages == outages and answered - last.answered <= STALE_AFTER_S
                and answered - asked <= REPORT_EVERY_S):
            since = last.answering_since
        self._last = _Answer(dict(ends), asked, answered, since, outages)

    def failed(self) -> None:
        """A report got no answer: what is left to read is not known until the next one."""
        self._last = None

    def unread(self, positions: Mapping[TopicPartition, int], now: float, waiting: bool,
               outages: int) -> Unread | None:
        """What is left to read beyond ``positions``; None when not known (see the module docstring)."""
        last = self._last
        if last is None or waiting or last.outages != outages or now - last.answered > STALE_AFTER_S:
            return None
        return Unread(frozenset(unread_partitions(last.ends, positions)), asked_ms=last.asked * 1000,
                      answering_since_ms=last.answering_since * 1000)


class ConsumerLag:
    def __init__(self, client: dict[str, Any], metadata: Any, job: JobId, stage: str, inputs: Sequence[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: monotonic seconds, the clock of the watermarks' idleness (``Unread`` is in ms of it)."""
        self.client = client
        self.metadata = metadata  # a metadata consumer the worker owns
        self.job = job
        self.stage = stage
        self.inputs = list(inputs)
        self._clock = clock
        self._wait = broker_wait(client)  # the process's outage state for this broker
        self._error: str | None = None
        self._ends = EndOffsets()

    def report(self, positions: Mapping[TopicPartition, int],
               reads: Sequence[TopicPartition] | None = None) -> None:
        """``reads``: the partitions this worker reads (all of the inputs' by default)."""
        asked = self._clock()
        try:
            marks = watermarks(self.metadata, list(reads) if reads else list_partitions(self.metadata, self.inputs))
        except Exception as exc:
            self._ends.failed()
            if unavailable(exc):
                self._wait.failed("consumer lag", exc)
            elif str(exc) != self._error:
                log.warning("consumer lag not measured", job=self.job, stage=self.stage, error=str(exc))
            self._error = str(exc)
            return
        self._error = None
        for (topic, partition), (_, high) in marks.items():
            CONSUMER_LAG.labels(self.job, topic, str(partition)).set(max(0, high - positions.get(TopicPartition(topic, partition), 0)))
        self._ends.answered({position: high for position, (_, high) in marks.items()}, asked, self._clock(),
                            self._wait.outages)

    def unread(self, positions: Mapping[TopicPartition, int]) -> Unread | None:
        """The partitions with records not read yet, by the last report; None when that is not
        known (see the module docstring)."""
        return self._ends.unread(positions, self._clock(), self._wait.waiting, self._wait.outages)
