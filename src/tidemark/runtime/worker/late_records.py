"""Records behind a stage's watermark, handled as the stage says (``Stage.late_records``).

A record is *late* when its event time is at or before the stage's watermark: the stage has
promised downstream (and its own event-time timers) that no such record would come. Only a stage
with a watermark (:mod:`tidemark.runtime.worker.watermarks`) has late records.

* ``drop``: counted in ``tidemark_worker_late_records_total{action="dropped"}``, not processed.
* ``side-output``: written unchanged (key, value, headers) to ``Stage.late_output`` with the
  headers ``tidemark-late-origin`` (``topic/partition@offset``), ``tidemark-late-event-time`` and
  ``tidemark-late-watermark``, counted with ``action="side-output"``, not processed. Written at
  least once, like dead letters: a record read again after a restore is written again.
* ``process``: counted with ``action="processed"`` and processed like any other record.

Whatever the policy, the worker logs ``records behind the watermark`` at most every
:data:`LOG_EVERY_S` seconds with how many came since the last line and one of them.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from tidemark.kafka.clients import produce_waiting, producer_config
from tidemark.api import LateRecords, Stage
from tidemark.runtime.job.metrics import LATE_RECORDS
from tidemark.runtime.job.records import InputRecord
from tidemark.chassis.logs import get_logger

log = get_logger(__name__)
LOG_EVERY_S = 10.0

ORIGIN_HEADER = "tidemark-late-origin"
EVENT_TIME_HEADER = "tidemark-late-event-time"
WATERMARK_HEADER = "tidemark-late-watermark"
_ACTIONS = {LateRecords.DROP: "dropped", LateRecords.SIDE_OUTPUT: "side-output", LateRecords.PROCESS: "processed"}


class LateRecordHandler:
    """Applies one stage's late-record policy; owns the side output's producer when it has one."""

    def __init__(self, client: dict[str, Any], job: str, stage: Stage) -> None:
        self.job = job
        self.stage = stage.name
        self.policy = stage.late_records
        self.topic = stage.late_output
        self.late = 0
        self._unlogged = 0
        self._logged_at = -LOG_EVERY_S
        self._counter = LATE_RECORDS.labels(job, stage.name, _ACTIONS[self.policy])
        self._producer = Producer(producer_config(client)) if self.topic is not None else None

    def handle(self, record: InputRecord, event_time_ms: int, watermark: int) -> bool:
        """Count a late record; True when it is still to be processed."""
        self.late += 1
        self._counter.inc()
        self._unlogged += 1
        if time.monotonic() - self._logged_at >= LOG_EVERY_S:
            log.warning("records behind the watermark", job=self.job, stage=self.stage, policy=self.policy.value,
                        records=self._unlogged, example=f"{record.topic}/{record.partition}@{record.offset}",
                        event_time=event_time_ms, watermark=watermark)
            self._logged_at, self._unlogged = time.monotonic(), 0
        if self.policy is LateRecords.PROCESS:
            return True
        if self._producer is not None and self.topic is not None:
            headers = [(h, v) for h, v in record.raw_headers().items()]
            headers += [(ORIGIN_HEADER, f"{record.topic}/{record.partition}@{record.offset}".encode()),
                        (EVENT_TIME_HEADER, str(event_time_ms).encode()), (WATERMARK_HEADER, str(watermark).encode())]
            produce_waiting(self._producer, self.topic, key=record.key, value=record.value, headers=headers)
            self._producer.poll(0)
        return False

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
