"""A warm standby stage worker: a process whose SparkSession is started and warm, waiting for an attempt.

Lifecycle: once an attempt runs, the supervisor starts one standby per worker process (``tidemark jobs
standby``). The standby imports the runtime, starts its local SparkSession (which registers
Tidemark's data source) and runs one warm-up query (one record of the control topic, discarded),
so the JVM, the SparkContext, the data-source lookup and Spark's Python workers are all started.
Then it blocks on its standard input. At the next failover (or a restore through the API) the
supervisor writes the new attempt there as one JSON line (:class:`Assignment`) instead of
starting a process, and the standby becomes that attempt's stage worker, a
:class:`~tidemark.runtime.worker.process.StageProcess` with the warm session. End of input (the
supervisor is gone) ends the standby. The standby of a stage that reads only channels
(``--no-session``) starts no session: that stage's workers run without one
(:mod:`tidemark.runtime.worker.query`), so its warmth is the interpreter and its imports.

What it saves is measured by ``bench/bench_recovery.py``: the interpreter start, the imports,
the JVM and SparkContext start and the first query's cold start, most of a fresh worker's start.

**Pre-started.** ``tidemark jobs warm-workers`` starts standbys with no supervisor at all (``idle``
given): once warm, each joins the machine's idle workers (:mod:`tidemark.runtime.placement.idle_workers`)
as a run's processes do at its end, so even a job's first start takes a started session instead of
starting a JVM.
"""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path
from typing import Any

from tidemark.config.settings import TidemarkSettings
from tidemark.kafka.topics import TopicNames
from tidemark.runtime.placement.idle_workers import IdleOrder
from tidemark.runtime.worker.query import session_options
from tidemark.runtime.worker.process import StageProcess, SupervisorLines
from tidemark.chassis.logs import get_logger
from tidemark.spark.session import spark_session, query_checkpoint_location
from tidemark.spark.stage_source import ReadSelection, StageSource, stage_source

log = get_logger(__name__)
WARM_UP_TIMEOUT_S = 30.0
INTERRUPTED_WARM_UP_S = 5.0  # how long an assignment waits for the warm-up batch to end


def warm_up(spark: Any, settings: TidemarkSettings, source: StageSource, interrupt: threading.Event,
            timeout_s: float = WARM_UP_TIMEOUT_S) -> bool:
    """Run one micro-batch of one control-topic record through the stage's source and discard it;
    True when the batch ran within ``timeout_s`` (within ``INTERRUPTED_WARM_UP_S`` once
    ``interrupt`` is set)."""
    source.prepare(spark)
    options = source.options(ReadSelection((TopicNames(settings.topic_prefix).control,), max_records=1))
    ran = threading.Event()

    def on_batch(frame: Any, batch_id: int) -> None:
        frame.toArrow()
        ran.set()

    with query_checkpoint_location("standby-warm-up") as location:
        query = (spark.readStream.format(source.format).options(**options).load().writeStream
                 .foreachBatch(on_batch).option("checkpointLocation", location)
                 .trigger(processingTime=f"{settings.spark.trigger_ms} milliseconds")
                 .start())
        deadline = time.monotonic() + timeout_s
        try:
            while not ran.is_set() and time.monotonic() < deadline:
                if interrupt.is_set():  # the attempt is waiting: let a running batch end, stopping it
                    deadline = min(deadline, time.monotonic() + INTERRUPTED_WARM_UP_S)  # mid-batch errs
                ran.wait(0.05)
        finally:
            query.stop()
    return ran.is_set()


def run_standby(settings: TidemarkSettings, stage: str, control_dir: Path | None = None,
                idle: IdleOrder | None = None, *, session: bool = True) -> int:
    """A supervisor's standby, its lines on standard input from the start (an assignment may come
    while it warms up); or, with ``idle`` (and a ``control_dir`` for its FIFO), a pre-started one,
    whose only line, once it is warm, is to go idle. Without ``session`` (the standby of a stage
    that reads only channels, :func:`tidemark.runtime.job.physical_plan.reads_with_spark`) it starts
    no SparkSession: its imports are its warmth."""
    lines = None
    if idle is None:
        lines = SupervisorLines(control_dir=control_dir, adoption_window_s=settings.adoption_window_s)
        lines.start()
    source = stage_source(settings)
    spark = spark_session(session_options(settings, f"tidemark-standby-{stage}", source)) if session else None
    interrupt = lines.arrived if lines is not None else threading.Event()
    if not interrupt.is_set():
        warm = warm_up(spark, settings, source, interrupt) if spark is not None else False
        log.info("standby warm; waiting for an attempt", stage=stage, warm_up_batch=warm, pid=os.getpid(),
                 pre_started=idle is not None, session=spark is not None)
    if lines is None:
        assert idle is not None and control_dir is not None
        lines = SupervisorLines(io.StringIO(idle.to_line().decode()), control_dir=control_dir,
                                adoption_window_s=settings.adoption_window_s)
        lines.start()
    return StageProcess(settings, lines, spark).run(None)
