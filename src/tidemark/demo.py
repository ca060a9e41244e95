"""``make demo``: the two-stage access-log job on the embedded defaults, a SIGKILL, a restore,
and an exactly-once verdict.

Steps (each printed with the time since start): the embedded broker (unless
``KAFKA_BOOTSTRAP_SERVERS`` names one) -> the four services as local processes -> the job
(per-URL counts per minute -> per-minute top URLs, two PySpark queries connected by a Kafka
topic) with checkpoints every 2 s -> a generator writing access-log records -> once checkpoints
complete, the ``top_urls`` worker is killed with SIGKILL -> the supervisor restores both stages
from the newest checkpoint -> the output is read read_committed and compared with what the input
implies -> stop-with-savepoint -> everything stops. Exit 0 only when the output is exactly once.
Ctrl-C at any point stops everything (exit 130).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

from tidemark.broker.embedded import BrokerStatus, kafka_or_embedded
from tidemark.examples.generator import expected_top_urls
from tidemark.examples.verify import read_committed, verify_top_urls
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, wait_for
from tidemark.services import SERVICES

JOB = "tidemark.examples.access_log:top_urls"
RECORDS = 6_000


class _Progress:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.started:6.1f}s] {text}", flush=True)


def _worker(home: Path, stage: str) -> dict | None:
    """The ready record (pid, epoch) of the newest attempt of ``stage``."""
    ready = sorted(home.glob(f"runs/*/{stage}.epoch-*.ready"), key=lambda p: int(p.name.split("-")[-1].split(".")[0]))
    return json.loads(ready[-1].read_text()) if ready else None


def _registered_after(run: JobRun, epoch: int) -> dict | None:
    return next((e for e in run.events("attempt registered") if e["epoch"] > epoch and not e["finished"]), None)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_demo(home: Path) -> int:
    """Run the demo; return the process exit code."""
    signal.signal(signal.SIGTERM, _interrupt)
    progress = _Progress()
    home = Path(home) / "demo"
    try:
        with kafka_or_embedded(home / "broker") as (bootstrap, status):
            progress.step(f"embedded broker ready at {bootstrap} (pid {status.pid})" if status
                          else f"using Kafka at {bootstrap}")
            return _run(home, bootstrap, status, progress)
    except KeyboardInterrupt:
        progress.step("interrupted; stopping everything")
        return 130


def _run(home: Path, bootstrap: str, status: BrokerStatus | None, progress: _Progress) -> int:
    run_id = uuid.uuid4().hex[:6]
    prefix = "tidemark" if status else f"tidemark-demo-{run_id}"
    names = {"job_id": f"access-log-top-urls-{run_id}", "input_topic": f"access-log-{run_id}",
             "channel_topic": f"url-minute-counts-{run_id}", "output_topic": f"top-urls-{run_id}"}
    with LocalPipeline(home, bootstrap, topic_prefix=prefix, services=tuple(SERVICES)) as pipe:
        for name, service in pipe.cluster.services.items():
            code, body = service.get("/readyz")
            progress.step(f"{name:<17} {service.url}/readyz -> {code} {body.decode()}")
        pipe.create_topic(names["input_topic"], 4)
        job = pipe.start_job(JOB, names)
        progress.step(f"job {names['job_id']} submitted: minute_counts -> {names['channel_topic']} -> top_urls "
                      f"-> {names['output_topic']} (2 PySpark queries, parallelism 2, checkpoints every 2 s)")
        wait_for(lambda: job.events("attempt registered"), 300, "the workers starting")
        progress.step("both stage workers running (Spark local mode); the coordinator is checkpointing")
        feeder = InputFeeder(bootstrap, names["input_topic"], total=RECORDS, chunk=200, pause_s=0.5).start()
        progress.step(f"generator writing {RECORDS} access-log records to {names['input_topic']}")
        wait_for(lambda: pipe.completed_checkpoints(names["job_id"]) >= 3, 180, "3 completed checkpoints")
        victim = _worker(home, "top_urls")
        assert victim is not None
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic()
        progress.step(f"SIGKILL -> top_urls worker pid {victim['pid']} (epoch {victim['epoch']}) after "
                      f"{pipe.completed_checkpoints(names['job_id'])} completed checkpoints")
        restored = wait_for(lambda: _registered_after(job, victim["epoch"]), 300, "the restore")
        restore_s = time.monotonic() - killed_at
        restore_from = job.events("restore issued")[-1]
        progress.step(f"restored both stages from checkpoint {restore_from['checkpoint']} as epoch "
                      f"{restored['epoch']} in {restore_s:.1f}s")
        records = feeder.join(timeout_s=300)
        progress.step(f"generator done: {len(records)} records; waiting for the output")
        expected = expected_top_urls(records)
        output = read_committed(bootstrap, names["output_topic"], expect=len(records), timeout_s=300)
        verdict = verify_top_urls(output, expected)
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
    print("  final top URLs per minute", "equal to the expectation" if verdict.final_ok else "DIFFERENT")
    print("  checkpoints completed    ", checkpoints)
    print("  restore time             ", f"{restore_s:.1f}s (kill -> both stages restored and running)")
    print("  exactly-once verdict     ", "PASS" if verdict.exactly_once else "FAIL " + "; ".join(verdict.details))
    print()
    print("demo OK" if verdict.exactly_once and code == 0 else "demo FAILED")
    return 0 if verdict.exactly_once and code == 0 else 1
