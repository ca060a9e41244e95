"""A stage's consumer lag: how far its positions are behind the end of each input partition.

``ConsumerLag.report(positions)`` updates ``tidemark_worker_consumer_lag`` from the partitions'
high watermarks. A metric never takes the worker down: when the broker cannot answer, the gauges
keep their last values and the outage is reported (once per distinct error otherwise).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tidemark.kafka.metadata import list_partitions, watermarks
from tidemark.kafka.outage import broker_wait, unavailable
from tidemark.runtime.metrics import CONSUMER_LAG
from tidemark.chassis.logs import get_logger
from tidemark.types import JobId

log = get_logger(__name__)


class ConsumerLag:
    def __init__(self, client: dict[str, Any], metadata: Any, job: JobId, stage: str, inputs: Sequence[str]) -> None:
        self.client = client
        self.metadata = metadata  # a metadata consumer the worker owns
        self.job = job
        self.stage = stage
        self.inputs = list(inputs)
        self._error: str | None = None

    def report(self, positions: Mapping[tuple[str, int], int], reads: Sequence[tuple[str, int]] | None = None
               ) -> dict[tuple[str, int], int] | None:
        """``reads``: the partitions this worker reads (all of the inputs' by default). Returns
        each partition's end offset (high watermark), None when the broker did not answer."""
        try:
            marks = watermarks(self.metadata, list(reads) if reads else list_partitions(self.metadata, self.inputs))
        except Exception as exc:
            if unavailable(exc):
                broker_wait(self.client).failed("consumer lag", exc)
            elif str(exc) != self._error:
                log.warning("consumer lag not measured", job=self.job, stage=self.stage, error=str(exc))
            self._error = str(exc)
            return None
        self._error = None
        for (topic, partition), (_, high) in marks.items():
            CONSUMER_LAG.labels(self.job, topic, str(partition)).set(max(0, high - positions.get((topic, partition), 0)))
        return {position: high for position, (_, high) in marks.items()}
