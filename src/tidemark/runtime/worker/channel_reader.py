"""A stage's channel partitions, read in process (Flink's remote input channels).

Every lane that reads channels reads them here: a stage after the job's first (its channel
partitions: the upstream tasks' records of its key groups, with their watermarks and barriers),
and a fused worker's stage lane (its own partitions of its stage's exchange, which the other
workers' readers forwarded to it). Channels are Tidemark's own topics, not the job's input, so
the lane reads them with a Kafka consumer of its own (librdkafka, read_committed) instead of a
streaming query: no Spark micro-batch per poll (about 100 ms of CPU each, whatever its size), no
JVM fetching and converting every record to Arrow, no query to start; a process whose lanes all
read channels starts no SparkSession at all
(:func:`tidemark.runtime.job.physical_plan.reads_with_spark`).
The job's input is read by a streaming query (a source stage's, or a fused worker's reader lane's).

:class:`ChannelReader` polls from the lane's positions (restored, else the earliest) and hands
what each poll returned to the lane's :class:`~tidemark.runtime.worker.batch_handoff.BatchHandoff`
as one batch of :class:`~tidemark.runtime.job.records.InputRecord` s; ``hand_over`` waits while
the batch before is processed, so the consumer is held back by a slow lane (librdkafka keeps
fetching up to its queue's bound meanwhile). Exactly-once is the channel input's, unchanged:
positions move per record as the lane processes them, the aligner holds what follows a barrier,
and a restore reads again from the checkpoint's cut (the consumer commits no offsets).

The reader stands in for the lane's streaming query (:class:`tidemark.runtime.worker.query`
asks ``isActive``, ``exception()`` and calls ``stop()``): a poll that raised (a handed-over batch
failed, or the consumer failed fatally) ends it, and the attempt with it. A broker outage does
not: librdkafka reconnects, and the lane resumes where it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer
from confluent_kafka import TopicPartition as KafkaPartition

from tidemark.chassis.logs import get_logger
from tidemark.kafka.clients import consumer_config
from tidemark.runtime.job.records import InputRecord, record_of
from tidemark.spark.offsets import PartitionOffsets
from tidemark.spark.stage_source import EARLIEST, ReadSelection

log = get_logger(__name__)
POLL_S = 0.1  # a poll returns what arrived within this long (or sooner, ``max_records`` of it)
# The broker holds a fetch that finds nothing visible (read_committed: a transaction not yet
# committed) up to this long: a committed batch waits at most this, an idle lane fetches ten times a second.
FETCH_WAIT_MS = 100


class ChannelReader:
    """Reads a lane's channel partitions in a thread of its own (see the module)."""

    def __init__(self, client: dict[str, Any], selection: ReadSelection,
                 hand_over: Callable[[list[InputRecord]], None], name: str) -> None:
        self.selection = selection
        self._config = consumer_config(client, None, **{"fetch.wait.max.ms": FETCH_WAIT_MS})
        self._hand_over = hand_over
        self._stopped = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"channel-{name}", daemon=True)

    def starting_offsets(self) -> dict[str, dict[str, int]]:
        """Where each partition is read from, as a query's ``startingOffsets`` names it (-2: the earliest)."""
        positions = self.selection.positions
        return PartitionOffsets.of((tp, positions.get(tp, EARLIEST)) for tp in self.selection.partitions).to_json()

    def start(self) -> ChannelReader:
        self._thread.start()
        return self

    @property
    def isActive(self) -> bool:  # noqa: N802 (the streaming query's name, which the lane's loop asks)
        return self._thread.is_alive()

    def exception(self) -> BaseException | None:
        return self._error

    def stop(self) -> None:
        """Stop polling; returns once a batch being handed over is taken (the lane is released
        or finished: what was not processed is read again by the next attempt)."""
        self._stopped.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        consumer = Consumer(self._config)
        try:
            consumer.assign([KafkaPartition(topic, partition, self.selection.positions.get((topic, partition),
                                                                                          OFFSET_BEGINNING))
                             for topic, partition in self.selection.partitions])
            reported: set[int] = set()
            while not self._stopped.is_set():
                messages = consumer.consume(num_messages=self.selection.max_records, timeout=POLL_S)
                records = []
                for message in messages:
                    error = message.error()
                    if error is None:
                        headers = message.headers()
                        records.append(record_of(
                            message.topic(), message.partition(), message.offset(), message.timestamp()[1],
                            message.key(), message.value(),
                            [{"key": name, "value": raw} for name, raw in headers] if headers else None))
                    elif error.fatal():
                        raise RuntimeError(f"reading the channel failed: {error.str()}")
                    elif error.code() not in reported:  # an outage: librdkafka reconnects and goes on
                        reported.add(error.code())
                        log.warning("reading the channel: broker error; retrying", error=error.str(),
                                    code=error.name())
                if records and not self._stopped.is_set():
                    self._hand_over(records)
        except BaseException as exc:
            if not self._stopped.is_set():
                self._error = exc
        finally:
            consumer.close()
