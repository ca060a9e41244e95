"""``make demo``: the two-stage access-log job on the embedded defaults, a SIGKILL, a restore,
and an exactly-once verdict.

Steps (each printed with the time since start): the embedded broker (unless
``KAFKA_BOOTSTRAP_SERVERS`` names one) -> the four services as local processes -> the job
(per-URL counts per minute -> per-minute top URLs, an event-time tumbling window: two PySpark
queries connected by a Kafka topic, each minute's top URLs emitted once, by an event-time timer,
when the watermark passes the minute's end) with checkpoints every 2 s -> a generator writing access-log records until the kill -> once
checkpoints complete and every stage has its warm standby (``tidemark.runtime.worker.standby``),
a ``top_urls`` worker is killed with SIGKILL -> the supervisor restores every stage from the newest
checkpoint: the killed worker's share in its stage's standby, the others in place, in their
running processes (``tidemark.runtime.worker.process``) -> the output is read read_committed and compared with what the input
topic implies (the check ``tidemark verify --example top_urls`` runs) -> stop-with-savepoint ->
everything stops. Exit 0 only when the output is exactly once.
Ctrl-C at any point stops everything (exit 130).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from tidemark.broker.embedded import BrokerStatus, EmbeddedBroker, kafka_or_embedded
from tidemark.examples.verify import EXAMPLES, example_expectation
from tidemark.kafka.clients import consumer_config
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, json_events, wait_for
from tidemark.config.service_modules import SERVICES
from tidemark.spark.class_archive import archive_path
from tidemark.verification.output_check import check_output

JOB = "tidemark.examples.access_log:top_urls"
RECORDS = 6_000  # at least; the generator goes on until the kill
STANDBY_WAIT_S = 120.0  # how long the kill waits for every stage's standby to be warm
WORKERS = 2  # worker processes per stage (issue #14): each owns half of its stage's tasks


class _Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


class _LiveStatus:
    """While the demo waits, one line every ``interval_s``: records written, committed output
    records (a minute's top URLs each, counted by a read_committed consumer) and completed
    checkpoints. Stops with the ``with`` block."""

    def __init__(self, progress: _Progress, bootstrap: str, output_topic: str,
                 records_in: Callable[[], int], checkpoints: Callable[[], int], interval_s: float = 5.0) -> None:
        self.progress, self.output_topic = progress, output_topic
        self.records_in, self.checkpoints, self.interval_s = records_in, checkpoints, interval_s
        self.records_out = 0
        self._consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, None))
        self._assigned = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-status", daemon=True)

    def __enter__(self) -> _LiveStatus:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()

    def _count_output(self) -> None:
        if not self._assigned:
            meta = self._consumer.list_topics(self.output_topic, timeout=5).topics.get(self.output_topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return
            self._consumer.assign([TopicPartition(self.output_topic, p, 0) for p in meta.partitions])
            self._assigned = True
        while messages := self._consumer.consume(1000, timeout=0.2):
            self.records_out += sum(1 for m in messages if m.error() is None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._count_output()
                written = self.records_in()
                self.progress.step(f"  live: {written} records in, {self.records_out} minutes closed (committed "
                                   f"output), {self.checkpoints()} checkpoints completed")
            except Exception as exc:  # a status line is never worth stopping the demo for
                self.progress.step(f"  live: status unavailable ({exc})")


def _worker(home: Path, stage: str) -> dict | None:
    """The ready record (pid, epoch) of the newest attempt of ``stage``."""
    ready = sorted(home.glob(f"runs/*/{stage}.epoch-*.ready"), key=lambda p: int(p.name.split("-")[-1].split(".")[0]))
    return json.loads(ready[-1].read_text()) if ready else None


def _layout(processes: dict[str, list[str]]) -> str:
    """What the worker processes run: each stage's count, and the exchange reader beside it
    where its workers are fused (the supervisor's ``starting attempt``: process -> its stages)."""
    counts: dict[tuple[str, ...], int] = {}
    for lanes in processes.values():
        counts[tuple(lanes)] = counts.get(tuple(lanes), 0) + 1
    return ", ".join(f"{lanes[-1]} x{count}" + (f" (each with {', '.join(lanes[:-1])})" if len(lanes) > 1 else "")
                     for lanes, count in counts.items())


def _stage_events(home: Path, event: str) -> list[dict]:
    """``event`` in every worker process's log (a standby's included)."""
    return [e for log in home.glob("runs/*/*.log") for e in json_events(log.read_text(errors="replace"))
            if e.get("event") == event]


def _processing_again(home: Path, stages: set[str], epoch: int) -> bool:
    """Every stage (some worker of it) processed records of an attempt after ``epoch``."""
    return stages <= {e["stage"] for e in _stage_events(home, "first records processed") if e["epoch"] > epoch}


def _registered_after(run: JobRun, epoch: int) -> dict | None:
    return next((e for e in run.events("attempt registered") if e["epoch"] > epoch and not e["finished"]), None)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(home: Path) -> int:
    """Run the demo; return the process exit code."""
    signal.signal(signal.SIGTERM, _interrupt)
    progress = _Progress()
    home = Path(home) / "demo"
    _clean(home)
    try:
        progress.step("starting the embedded broker" if not os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
                      else "using the Kafka named by KAFKA_BOOTSTRAP_SERVERS")
        with kafka_or_embedded(home / "broker") as (bootstrap, status):
            progress.step(f"embedded broker ready: {status.describe()}" if status
                          else f"using Kafka at {bootstrap}")
            return _run(home, bootstrap, status, progress)
    except KeyboardInterrupt:
        progress.step("interrupted; stopping everything")
        return 130


def _clean(home: Path) -> None:
    """Every demo starts from an empty home: a broker left by an interrupted run is stopped and its
    data, the checkpoints and the logs of earlier runs are removed."""
    EmbeddedBroker(home / "broker").stop()
    shutil.rmtree(home, ignore_errors=True)


def _run(home: Path, bootstrap: str, status: BrokerStatus | None, progress: _Progress) -> int:
    run_id = uuid.uuid4().hex[:6]
    prefix = "tidemark" if status else f"tidemark-demo-{run_id}"
    names = {"job_id": f"access-log-top-urls-{run_id}", "input_topic": f"access-log-{run_id}",
             "channel_topic": f"url-minute-counts-{run_id}", "output_topic": f"top-urls-{run_id}",
             "workers": WORKERS}
    if not archive_path().is_file():
        progress.step("building the JVM class archive of Spark's classes (once per machine: about 30 s)")
    with LocalPipeline(home, bootstrap, topic_prefix=prefix, services=tuple(SERVICES)) as pipe:
        for name, service in pipe.cluster.services.items():
            code, body = service.get("/readyz")
            progress.step(f"{name:<17} {service.url}/readyz -> {code} {body.decode()}")
        pipe.create_topic(names["input_topic"], 4)
        job = pipe.start_job(JOB, names)
        progress.step(f"job {names['job_id']} submitted: minute_counts -> {names['channel_topic']} -> top_urls "
                      f"-> {names['output_topic']} (parallelism 2, {WORKERS} worker processes per stage, "
                      "checkpoints every 2 s)")
        started = wait_for(lambda: job.events("starting attempt"), 120, "the supervisor starting")[0]
        processes = started["processes"]
        progress.step(f"starting {len(processes)} PySpark worker processes ({_layout(processes)}; "
                      "a JVM and a SparkSession each: 15-60 s)")
        registered = wait_for(lambda: job.events("attempt registered"), 300, "the workers starting")[0]
        progress.step(f"both stages running on {len(processes)} worker processes, "
                      f"{registered['tasks']} tasks (Spark local mode); the coordinator is checkpointing")
        killed = threading.Event()
        feeder = InputFeeder(bootstrap, names["input_topic"], total=RECORDS, chunk=200, pause_s=1.0,
                             until=killed.is_set).start()
        progress.step(f"generator writing access-log records to {names['input_topic']} (200/s, until the kill)")
        status_line = _LiveStatus(progress, bootstrap, names["output_topic"], lambda: len(feeder.records),
                                  lambda: pipe.completed_checkpoints(names["job_id"]))
        stages = len({lanes[-1] for lanes in processes.values()})  # a standby per stage launched
        with status_line:
            wait_for(lambda: pipe.completed_checkpoints(names["job_id"]) >= 3, 180, "3 completed checkpoints")
            try:
                warm = wait_for(lambda: len(_stage_events(home, "standby warm; waiting for an attempt")) >= stages,
                                STANDBY_WAIT_S, "the warm standbys")
            except TimeoutError:
                warm = False
            progress.step(f"{stages} warm standbys waiting, one per stage (a JVM and a SparkSession started, "
                          "ready to take a failed worker's place)" if warm else
                          f"the warm standbys were not ready within {STANDBY_WAIT_S:.0f}s; killing anyway")
            victim = _worker(home, f"top_urls.w{WORKERS - 1}")
            assert victim is not None
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at = time.monotonic()
            killed.set()
            progress.step(f"SIGKILL -> top_urls worker {WORKERS - 1} of {WORKERS}, pid {victim['pid']} "
                          f"(epoch {victim['epoch']}) after "
                          f"{pipe.completed_checkpoints(names['job_id'])} completed checkpoints")
            restored = wait_for(lambda: _registered_after(job, victim["epoch"]), 300, "the restore")
            restore_s = time.monotonic() - killed_at
            restore_from = job.events("restore issued")[-1]
            taken = {how: sum(e["epoch"] == restored["epoch"] for e in job.events(event))
                     for how, event in (("in place", "a released worker takes the attempt in place"),
                                        ("in a warm standby", "a warm standby takes the attempt"))}
            progress.step(f"restored both stages from checkpoint {restore_from['checkpoint']} as epoch "
                          f"{restored['epoch']} in {restore_s:.1f}s ("
                          + ", ".join(f"{count} worker process{'es' if count != 1 else ''} {how}"
                                      for how, count in taken.items()) + ")")
            wait_for(lambda: _processing_again(home, set(started["workers"]), victim["epoch"]) or None, 300,
                     "every stage processing again")
            processing_s = time.monotonic() - killed_at
            progress.step(f"every stage processing records again {processing_s:.1f}s after the kill")
            records = feeder.join(timeout_s=300)
            progress.step(f"generator done: {len(records)} records; waiting for the output")
            client = {"bootstrap.servers": bootstrap}  # what `tidemark verify --example top_urls` runs
            _, expected = example_expectation(client, "top_urls", names["input_topic"])
            verdict = check_output(client, names["output_topic"], expected, EXAMPLES["top_urls"].identify,
                                   wait_s=300, settle_s=3)
        request = pipe.client().trigger_savepoint(names["job_id"], stop=True)
        savepoint = pipe.client().wait_for_savepoint(names["job_id"], request["request_id"], timeout_s=120)
        code = job.wait(timeout_s=120)
        progress.step(f"stop-with-savepoint {savepoint.get('status')} at {savepoint.get('metadata_path')}; "
                      f"job exited {code}")
        checkpoints = pipe.completed_checkpoints(names["job_id"])
    print()
    print("  records in               ", len(records))
    print("  output records           ", f"{verdict.records} (expected {verdict.expected_records})")
    print("  duplicates / missing     ", f"{verdict.duplicates} / {verdict.missing}")
    print("  wrong values / unexpected", f"{verdict.wrong_values} / {verdict.unexpected} (each minute's final "
          "top URLs are checked)")
    print("  minutes closed           ", f"{verdict.expected_records} by the watermark (event time), each emitted once "
          "by an event-time timer")
    print("  worker processes         ", f"{len(started['processes'])} ({_layout(started['processes'])})")
    print("  checkpoints completed    ", checkpoints)
    print("  restore time             ", f"{restore_s:.1f}s (kill -> every stage restored and running), "
          f"{processing_s:.1f}s (kill -> every stage processing records)"
          + ("" if warm else "; the standbys were not warm yet"))
    if status is not None:
        print("  broker start-up          ", f"{status.engine} {status.startup_s:.1f}s"
              + (f" (after fetching its jars for {status.fetch_s:.1f}s)" if status.fetch_s else ""))
    print("  exactly-once verdict     ", "PASS" if verdict.exactly_once else "FAIL " + "; ".join(verdict.details))
    print()
    print("demo OK" if verdict.exactly_once and code == 0 else "demo FAILED")
    return 0 if verdict.exactly_once and code == 0 else 1
