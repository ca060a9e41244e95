"""End-to-end throughput and checkpoint durations of the single-stage access-log job.

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run. For each
state backend: writes ``--records`` access-log records, starts the job (coordinator and
checkpoint-store as local services, one PySpark worker), and measures from the moment the worker
is running until every result is committed (read_committed) in the output topic. Checkpoint
durations (trigger -> completed, as the coordinator's stats tracker measures them) are collected
for the whole run and summarized as p50 / p99.

    .venv/bin/python bench/bench_pipeline.py --records 200000 --interval-ms 2000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.generator import generate, produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import LocalPipeline

JOB = "tidemark.examples.access_log:url_counts"


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(bootstrap: str, home: Path, records: int, interval_ms: int, backend: str) -> dict[str, float]:
    run_id = uuid.uuid4().hex[:6]
    args = {"job_id": f"bench-{backend}-{run_id}", "input_topic": f"bench-in-{run_id}",
            "output_topic": f"bench-out-{run_id}", "state_backend": backend}
    with LocalPipeline(home / backend, bootstrap, topic_prefix=f"bench-{run_id}",
                       env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(interval_ms)}) as pipe:
        pipe.create_topic(args["input_topic"], 4)
        print(f"[{backend}] writing {records} records ...", flush=True)
        produce(bootstrap, args["input_topic"], generate(records), 4, chunk=10_000)
        job = pipe.start_job(JOB, args)
        while not list((home / backend / "runs").glob("*/count_hits.epoch-*.ready")):
            time.sleep(0.1)
        started = time.monotonic()
        print(f"[{backend}] worker running; waiting for {records} committed results ...", flush=True)
        durations: dict[int, float] = {}
        output: list = []
        while len(output) < records:
            output = read_committed(bootstrap, args["output_topic"], expect=records, timeout_s=15, settle_s=0)
            for entry in pipe.client().history(args["job_id"])["checkpoints"]:
                if entry["status"] == "COMPLETED" and entry["duration_ms"] is not None:
                    durations[entry["id"]] = entry["duration_ms"]
            print(f"[{backend}]   {len(output)} results, {len(durations)} checkpoints", flush=True)
        elapsed = time.monotonic() - started
        job.stop()
    values = list(durations.values())
    return {"throughput": records / elapsed, "elapsed": elapsed, "checkpoints": len(values),
            "p50": _percentile(values, 0.5), "p99": _percentile(values, 0.99),
            "mean": statistics.fmean(values) if values else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--backends", default="heap,rocksdb")
    options = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-pipeline-"))
    with kafka_or_embedded(home / "broker") as (bootstrap, broker):
        results = {b: run(bootstrap, home, options.records, options.interval_ms, b)
                   for b in options.backends.split(",")}
    print()
    print(f"single-stage access-log job, {options.records} records, checkpoint interval {options.interval_ms} ms, "
          f"broker {'external' if broker is None else 'embedded ' + broker.describe()}")
    print(f"{'backend':<9} {'records/s':>10} {'elapsed s':>10} {'checkpoints':>12} {'p50 ms':>8} {'p99 ms':>8}")
    for backend, r in results.items():
        print(f"{backend:<9} {r['throughput']:>10,.0f} {r['elapsed']:>10.1f} {r['checkpoints']:>12} "
              f"{r['p50']:>8.0f} {r['p99']:>8.0f}")


if __name__ == "__main__":
    main()
