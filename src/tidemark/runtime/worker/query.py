"""Run one attempt of a stage worker: a PySpark Structured Streaming query over the job's input,
or its channels read in process.

Lifecycle: ``run_attempt(settings, attempt, spark, released)`` wires and restores the attempt
(:func:`tidemark.runtime.worker.bootstrap.bootstrap`, which returns its
:class:`~tidemark.runtime.worker.runner.StageRunner`) while its SparkSession starts in the background (or takes the session it is
given: a warm standby's, or the one of the process's previous attempt,
:mod:`tidemark.runtime.worker.process`), starts the streaming query (the stage's Kafka source,
:mod:`tidemark.spark.stage_source`, -> ``foreachBatch``, whose batches a processing thread
processes while Spark fetches the next: :mod:`tidemark.runtime.worker.batch_handoff`), writes the
attempt's ready file, then loops: a tick every 100 ms (timers, idle partitions, the control plane)
queued on each lane's processing thread between its micro-batches, consumer lag and the
worker's resources (:mod:`tidemark.runtime.worker.resources`) every few seconds, until the stage
finishes (stop-with-savepoint completed: code 0), the supervisor releases the attempt
(``released()``: the query stopped and the worker closed, the session kept and returned for the
next attempt) or the query or a batch fails (raises). A broker outage neither ends the loop nor
fails the query: every Kafka call of the stage waits for the broker, and a
:class:`~tidemark.kafka.outage.BrokerWatch` reports the outage in the log.

A fused worker's attempt (:meth:`~tidemark.runtime.job.attempt.Attempt.lanes`) runs two stage
workers, *lanes*, in the one session: each restored, with its own processing thread and runner (a
lane that waits blocks only its own threads), its fault points counted for it
(:mod:`tidemark.runtime.job.faults`); one ready file for the process, whose attempt ends when
every lane finished, or when any fails. The exchange reader's lane runs the process's streaming
query over the job's input; the stage lane reads its exchange partitions in process
(:mod:`tidemark.runtime.worker.channel_reader`, standing in for a query), and the records of the
worker's own key groups reach it through the process's local channel
(:mod:`tidemark.runtime.worker.local_channel`), drained on its processing thread.

Every stage that reads channels reads them so, and an attempt none of whose lanes reads the job's
input (a stage after the job's first, unfused) starts no session: it runs without a JVM, keeps a
session it was given (a warm standby's) for a later attempt, and reports no JVM heap.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.clients import base_config
from tidemark.kafka.outage import BrokerWatch
from tidemark.runtime.worker.batch_handoff import BatchHandoff
from tidemark.runtime.worker.channel_reader import ChannelReader
from tidemark.runtime.worker.inputs import ChannelInput
from tidemark.runtime.worker.local_channel import LOCAL_CAPACITY, LocalChannel
from tidemark.runtime.worker.consumer_lag import REPORT_EVERY_S
from tidemark.runtime.job.records import InputRecord, batch_ends, records_of, stepped_records
from tidemark.exit_codes import EXIT_REFUSED
from tidemark.runtime.job.start_errors import failed_file, not_retryable_reason
from tidemark.runtime.job import faults
from tidemark.runtime.job.attempt import Attempt
from tidemark.runtime.job.physical_plan import reads_with_spark
from tidemark.runtime.worker.bootstrap import bootstrap, read_selection, read_steps
from tidemark.runtime.worker import loaded_code
from tidemark.runtime.worker.resources import WorkerResources
from tidemark.runtime.worker.start_timings import StartTimings
from tidemark.runtime.worker.runner import StageRunner
from tidemark.chassis.logs import get_logger
from tidemark.spark.session import SessionOptions, spark_session, query_checkpoint_location
from tidemark.spark.spark_step import REJECTED, MicroBatch, StageSteps
from tidemark.spark.stage_source import StageSource, stage_source
from tidemark.types import TopicPartition

log = get_logger(__name__)


class QueryFailed(RuntimeError):
    """The streaming query stopped with an error."""


def session_options(settings: TidemarkSettings, app_name: str, source: StageSource) -> SessionOptions:
    """The session of a stage worker (or its standby) on the settings' master, with what its source needs."""
    return SessionOptions(app_name=app_name, master=settings.spark.master, driver_host=settings.spark.driver_host,
                          java_options=settings.spark.java_options, class_archive=settings.spark.class_archive,
                          extra_conf={**source.session_conf(), **settings.spark.conf})


class _SessionStart(threading.Thread):
    """Starts the SparkSession (JVM, SparkContext, data-source registration) while the worker
    restores its state; :meth:`session` joins it."""

    def __init__(self, options: SessionOptions) -> None:
        super().__init__(name="spark-session-start", daemon=True)
        self.options = options
        self._session: Any = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            self._session = spark_session(self.options)
        except BaseException as exc:
            self._error = exc

    def session(self) -> Any:
        self.join()
        if self._error is not None:
            raise self._error
        return self._session


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds run_attempt, so its temp directory is removed


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended: the process's exit status; ``released``: the supervisor released it
    and the process takes the next attempt, in ``spark`` (its session, kept; None when it has none:
    an attempt that reads only channels starts none). An attempt that was not released stopped its session."""

    code: int
    spark: Any = None
    released: bool = False


def _never() -> bool:
    return False


def run_attempt(settings: TidemarkSettings, attempt: Attempt, spark: Any = None,
                released: Callable[[], bool] = _never) -> AttemptEnd:
    """Run the stage, in ``spark`` (a warm session) or a session started meanwhile, until it
    finishes, fails or is ``released``; a failure a restart will not fix
    (:mod:`tidemark.runtime.job.start_errors`) leaves its reason in the attempt's ``.failed`` file and
    ends with ``EXIT_REFUSED``."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _run_stage(settings, attempt, spark, released)
    except Exception as exc:
        reason = not_retryable_reason(exc)
        if reason is None:
            raise
        log.error("stage cannot run; a restart will not fix it", job_ref=attempt.job_ref, stage=attempt.stage,
                  epoch=attempt.epoch, reason=reason)
        path = failed_file(attempt.run_dir, attempt.process, attempt.epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(reason + "\n", encoding="utf-8")
        return AttemptEnd(EXIT_REFUSED)


@dataclass
class _Lane:
    """One stage worker of the process (a process may run several: their attempts share the
    session, each with its own runner, query and processing thread, :meth:`Attempt.lanes`)."""

    attempt: Attempt
    worker: StageRunner
    steps: StageSteps
    batches: BatchHandoff
    on_batch: Callable[[Any, int], None]
    spark_checkpoints: str
    query: Any = None  # its streaming query, or its ChannelReader
    local: LocalChannel | None = None  # the local channel the lane reads (a fused worker's stage lane)
    # read in process (a fused worker's stage lane): the consumer's client and what takes its records
    channel: tuple[dict[str, Any], Callable[[list[InputRecord]], None]] | None = None
    tick_queued: bool = False  # a tick waits on the lane's processing thread (_tick_soon)


def _run_stage(settings: TidemarkSettings, attempt: Attempt, spark: Any, released: Callable[[], bool]) -> AttemptEnd:
    timings = StartTimings(fresh_process=spark is None)
    starting = None
    source = stage_source(settings)
    queried = reads_with_spark(attempt)  # else every lane reads its channels in process
    if spark is None and queried:  # the JVM starts while the worker restores
        starting = _SessionStart(session_options(settings, f"tidemark-{attempt.stage}", source))
        starting.start()
    watch = BrokerWatch(base_config(settings)).start()
    workers: list[tuple[Attempt, StageRunner]] = []
    local = LocalChannel(attempt.epoch, LOCAL_CAPACITY) if attempt.fused else None
    with contextlib.ExitStack() as stack:
        try:  # restored, the session started, each lane opened; else what was restored is closed
            for lane_attempt in attempt.lanes():
                workers.append((lane_attempt, bootstrap(settings, lane_attempt, local)))
            timings.mark("restore")
            loaded_code.note()  # the job's modules, just imported (runtime.placement.idle_workers)
            if starting is not None:
                spark = starting.session()
            timings.mark("session")
            channel_client = base_config(settings)
            lanes = [_open_lane(lane_attempt, worker, stack.enter_context(query_checkpoint_location(
                        f"{worker.job}-{lane_attempt.process}")), released, timings,
                        channel_client if isinstance(worker.input, ChannelInput) else None, times_channel=not queried)
                     for lane_attempt, worker in workers]
            if local is not None and local.tasks:
                _read_locally(lanes[-1], local, released)
        except BaseException:
            for _, worker in workers:
                worker.close()
            watch.stop()
            raise
        return _run_query(lanes, attempt, spark, source, watch, released, settings.http_port,
                          settings.spark.trigger_ms, timings)


def _open_lane(attempt: Attempt, worker: StageRunner, spark_checkpoints: str, released: Callable[[], bool],
               timings: StartTimings, channel_client: dict[str, Any] | None = None,
               times_channel: bool = False) -> _Lane:
    """The lane of ``worker``: its Spark steps, its processing thread and its ``foreachBatch``;
    ``channel_client``: the lane reads its channels in process with it (a stage that reads
    channels, :mod:`tidemark.runtime.worker.channel_reader`), not with a streaming query;
    ``times_channel``: its records time the start-up's first fetch (no lane reads the job's input)."""
    steps = read_steps(worker)

    def process(batch: Any) -> None:
        if released():  # the attempt is over: its records are the next attempt's to process
            return
        with worker.lock:
            if not worker.closed:
                if isinstance(batch, list):  # the channel reader's records
                    worker.on_batch(batch)
                elif isinstance(batch, MicroBatch):
                    worker.on_batch(micro_batch_records(batch), micro_batch_ends(batch))
                else:
                    worker.on_batch(records_of(batch), batch_ends(batch), functools.partial(batch_ends, batch))
        if not timings.reported and (times_channel or not isinstance(batch, list)) and batch_rows(batch):
            timings.mark("first_process")
            timings.report(job=worker.job, stage=worker.stage.name, epoch=attempt.epoch, worker=attempt.worker)

    batches = BatchHandoff(process, name=f"batches-{attempt.stage}",
                           initializer=lambda: faults.enter_lane(attempt.stage))

    def on_batch(frame: Any, batch_id: int) -> None:
        if released():
            return
        try:  # while the batch before is processed
            batch = steps.collect(frame, batch_id, spark_checkpoints) if steps else frame.toArrow()
        except Exception:
            if released():  # stopping the query cancelled the batch's Spark job
                return
            raise
        if batch_rows(batch):
            timings.mark("first_fetch")
        batches.hand_over(batch)

    def on_records(records: list[InputRecord]) -> None:
        if released():
            return
        if times_channel and records:  # else the start-up's breakdown times the job's input
            timings.mark("first_fetch")
        batches.hand_over(records)

    return _Lane(attempt, worker, steps, batches, on_batch, spark_checkpoints,
                 channel=(channel_client, on_records) if channel_client is not None else None)


def _read_locally(lane: _Lane, local: LocalChannel, released: Callable[[], bool]) -> None:
    """``lane`` (the fused worker's stage) takes what ``local`` is handed, on its processing
    thread; after the attempt is released, it is taken and dropped (the next attempt reads it again)."""
    worker = lane.worker

    def drain() -> None:
        records = local.drain()
        if records and not released():
            with worker.lock:
                if not worker.closed:
                    worker.on_local(records)

    local.on_push = lambda: lane.batches.run_soon(drain)
    lane.local = local


def batch_rows(batch: Any) -> int:
    """The rows of a collected micro-batch (an Arrow table, a :class:`MicroBatch`, or the channel
    reader's records)."""
    if isinstance(batch, list):
        return len(batch)
    if isinstance(batch, MicroBatch):
        return (batch.plain.num_rows if batch.plain is not None else 0) + sum(s.table.num_rows for s in batch.stepped)
    return batch.num_rows


def micro_batch_records(batch: MicroBatch) -> Iterator[InputRecord]:
    """The records of a micro-batch with Spark steps: the plain topics' and each step's rows."""
    if batch.plain is not None:
        yield from records_of(batch.plain)
    for stepped in batch.stepped:
        rejected = REJECTED if REJECTED in stepped.table.column_names else None
        yield from stepped_records(stepped.table, stepped.row_columns, rejected, stepped.originals)


def micro_batch_ends(batch: MicroBatch) -> dict[TopicPartition, int]:
    """The positions after a micro-batch with Spark steps: past its rows, and past what a step
    left out (the query's offset log, when it has the batch)."""
    ends = dict(batch.ends or {})
    tables = [batch.plain] if batch.plain is not None else []
    for table in [*tables, *(stepped.table for stepped in batch.stepped)]:
        for partition, end in batch_ends(table).items():
            if end > ends.get(partition, -1):
                ends[partition] = end
    return ends


def _run_query(lanes: list[_Lane], attempt: Attempt, spark: Any, source: StageSource, watch: BrokerWatch,
               released: Callable[[], bool], metrics_port: int, trigger_ms: int,
               timings: StartTimings) -> AttemptEnd:
    ended = AttemptEnd(0)  # until it ends otherwise (an exception: the session is stopped)
    try:
        if released():  # released while it restored and its session started: no query to start
            ended = AttemptEnd(0, spark, released=True)
        else:
            # What the process holds by now (modules, the session, the restored state) is never
            # scanned again by the collector while the attempt runs: full collections scan only what
            # the batches leave behind (unfrozen when the attempt ends, so its cycles are collected)
            gc.freeze()
            ended = _stream(lanes, attempt, spark, source, released, metrics_port, trigger_ms, timings)
        return ended
    finally:
        gc.unfreeze()
        watch.stop()
        for lane in lanes:
            if lane.local is not None:
                lane.local.close()  # a reader waiting to hand records over ends its batch
        for lane in lanes:
            lane.worker.abandon()  # a batch waiting for a stop-with-savepoint gives up
        for lane in lanes:
            if lane.channel is not None and lane.query is not None:
                lane.query.stop()  # a channel reader (a streaming query stops with its session)
        for lane in reversed(lanes):
            lane.batches.close()  # after a batch still being processed
            lane.steps.close()
            with lane.worker.lock:
                lane.worker.close()
        if not ended.released and spark is not None:
            spark.stop()


def _tick_soon(lane: _Lane, released: Callable[[], bool]) -> None:
    """The lane's tick (processing-time timers, idle partitions, the control plane: its runner's
    ``on_tick``) on its own processing thread, between its batches, unless one is queued there
    already: a lane in a long batch delays its own ticks only, never another lane's (a fused
    worker's stage lane answers live queries and commits its output while its reader lane
    processes a batch of 100,000 records)."""
    if lane.tick_queued:
        return
    lane.tick_queued = True
    worker = lane.worker

    def tick() -> None:
        lane.tick_queued = False
        if released() or worker.abandoned:  # the attempt is over (also when it failed: no trigger taken then)
            return
        with worker.lock:
            if not worker.closed:
                worker.on_tick()

    lane.batches.run_soon(tick)


def _start_query(lane: _Lane, spark: Any, source: StageSource, trigger_ms: int) -> dict[str, Any]:
    """Start the lane's streaming query (or its channel reader); the options it reads with."""
    worker = lane.worker
    if lane.channel is not None:
        client, on_records = lane.channel
        reader = ChannelReader(client, read_selection(worker), on_records, worker.stage.name)
        lane.query = reader.start()
        return {"startingOffsets": json.dumps(reader.starting_offsets()), "source": "in-process"}
    options = source.options(read_selection(worker))
    lane.steps.prepare(spark)  # before the query: its micro-batches' sessions see the steps' tables
    stream = spark.readStream.format(source.format).options(**options).load()
    lane.query = (stream.writeStream.foreachBatch(lane.on_batch).option("checkpointLocation", lane.spark_checkpoints)
                  .trigger(processingTime=f"{trigger_ms} milliseconds")
                  .queryName(f"{worker.job}.{worker.stage.name}").start())
    return options


def _stream(lanes: list[_Lane], attempt: Attempt, spark: Any, source: StageSource, released: Callable[[], bool],
            metrics_port: int, trigger_ms: int, timings: StartTimings) -> AttemptEnd:
    if any(lane.channel is None for lane in lanes):
        source.prepare(spark)
    options = [_start_query(lane, spark, source, trigger_ms) for lane in lanes]
    timings.mark("query")
    process = lanes[-1].worker  # the process's stage: the one it is launched as (Attempt.lanes)
    attempt.ready_file.parent.mkdir(parents=True, exist_ok=True)
    attempt.ready_file.write_text(json.dumps({
        "stage": process.stage.name, "worker": attempt.worker, "epoch": attempt.epoch, "pid": os.getpid(),
        "metrics_port": metrics_port, "stages": [lane.worker.stage.name for lane in lanes],
        "restored_from": process.restored_from.checkpoint_id if process.restored_from else None}))
    for lane, read in zip(lanes, options):
        log.info("stage running", job=lane.worker.job, stage=lane.worker.stage.name, epoch=lane.attempt.epoch,
                 parallelism=lane.attempt.parallelism, worker=lane.attempt.worker,
                 workers=lane.worker.stage.workers or 1, tasks=[t.task_id for t in lane.worker.tasks],
                 source=read.get("source", source.format), starting_offsets=read["startingOffsets"],
                 local_channels=len(lane.local.tasks) if lane.local is not None else 0)
    resources = WorkerResources(process.job, process.stage.name,  # the process's, once
                                spark.sparkContext._jvm if spark is not None else None)
    resources.report()
    last_lag = 0.0
    running = list(lanes)
    while True:
        for lane in [lane for lane in running if lane.worker.finished]:
            lane.query.stop()
            log.info("stage finished", job=lane.worker.job, stage=lane.worker.stage.name, epoch=attempt.epoch)
            running.remove(lane)
        if not running:
            return AttemptEnd(0)
        if released():
            for lane in lanes:
                lane.worker.abandon()  # a batch waiting for a stop-with-savepoint gives up
            for lane in lanes:
                lane.query.stop()  # returns once the running batch has
            log.info("attempt released: query stopped", job=process.job, stage=process.stage.name,
                     epoch=attempt.epoch)
            return AttemptEnd(0, spark, released=True)
        for lane in running:
            lane.batches.check()  # a batch that raised ends the attempt, also when no batch follows
            if not lane.query.isActive:
                raise QueryFailed(f"stage {lane.worker.stage.name} query stopped: {lane.query.exception()}")
        time.sleep(0.1)
        for lane in running:
            _tick_soon(lane, released)
        if time.monotonic() - last_lag > REPORT_EVERY_S:
            for lane in running:
                lane.worker.report_lag()
            resources.report()
            last_lag = time.monotonic()
