"""TTL state that stays bounded: 10,000 new keys a second with a 10-second TTL, for 10 minutes.

Runs ``bench/tidemark_ttl_job.py:first_visits`` (one keyed stage, parallelism 4, one worker,
exactly-once, 2 s checkpoints): every input record has a key never seen before, which the job
keeps in a ``ValueState`` with a TTL of ``--ttl-s`` seconds and never reads again. Only the
background TTL cleanup (each task's next 2,000 stored values after every micro-batch,
``StageTask.clean_up_expired``) removes them; without it the state grows by ``--rate`` keys a
second for the whole run.

Input is written at ``--rate`` records/s for ``--minutes`` minutes per backend (``--backends``,
default heap then rocksdb). Every ``--sample-s`` seconds the table gets a row: the records written
so far, the newest completed checkpoint's full state size and the bytes it wrote (RocksDB:
incremental, the new SST files), and the worker's resident set (its Python and JVM). A flat full
size and resident set over the run is the target; the last lines compare the last sample with
the first one taken after ``2 x ttl_s`` (once the state holds a full TTL's worth of keys). The
job must keep up: every first-visit output is read back (read_committed) and counted at the end.

    .venv/bin/python bench/bench_ttl.py --minutes 10 --rate 10000 --ttl-s 10

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.generator import produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import LocalPipeline, wait_for
from tidemark.processes import tree_pids

BENCH = Path(__file__).resolve().parent
JOB = "tidemark_ttl_job:first_visits"


def _rss_mib(root: int) -> float:
    """Resident set of ``root``'s stage-worker process trees (MiB)."""
    total = 0
    for pid in tree_pids(root)[1:]:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def _newest_completed(pipe: LocalPipeline, job_id: str) -> dict[str, Any] | None:
    try:
        history = pipe.client().history(job_id)
    except Exception:  # the coordinator busy: the next sample asks again
        return None
    done = [c for c in history["checkpoints"] if c.get("status") == "COMPLETED"]
    return max(done, key=lambda c: c["id"]) if done else None


def one_backend(bootstrap: str, root: Path, backend: str, rate: int, minutes: float, ttl_s: int,
                sample_s: float) -> list[tuple[float, int, int, int, float]]:
    run = uuid.uuid4().hex[:6]
    args = {"job_id": f"ttl-{run}", "input_topic": f"ttl-in-{run}", "output_topic": f"ttl-out-{run}",
            "state_backend": backend, "ttl_s": ttl_s}
    total = int(rate * minutes * 60)
    samples: list[tuple[float, int, int, int, float]] = []
    written = [0]
    with LocalPipeline(root / f"{backend}-{run}", bootstrap, topic_prefix=f"ttl-{run}", standby=False) as pipe:
        pipe.create_topic(args["input_topic"], 4)
        job = pipe.start_job(JOB, args, env={"PYTHONPATH": os.pathsep.join(
            [str(BENCH), *filter(None, [os.environ.get("PYTHONPATH")])])})
        wait_for(lambda: list((root / f"{backend}-{run}" / "runs").glob("*/*.epoch-1.ready")), 300,
                 "the worker running its query", poll_s=0.1)
        records = (json.dumps({"id": f"{run}-{i}"}).encode() for i in range(total))
        feeder = threading.Thread(target=produce, args=(bootstrap, args["input_topic"], records, 4),
                                  kwargs={"rate_per_s": rate, "progress": lambda n: written.__setitem__(0, n)},
                                  daemon=True)
        started = time.monotonic()
        feeder.start()
        print(f"{backend}: writing {total} records at {rate}/s; a row every {sample_s:.0f} s", flush=True)
        print(f"{'s':>6} {'written':>10} {'checkpoint':>10} {'full size MiB':>14} {'written MiB':>12} "
              f"{'worker RSS MiB':>15}", flush=True)
        while feeder.is_alive():
            time.sleep(sample_s)
            newest = _newest_completed(pipe, args["job_id"]) or {}
            row = (time.monotonic() - started, written[0], newest.get("id", 0),
                   newest.get("full_size_bytes") or 0, _rss_mib(job.process.pid))
            samples.append(row)
            print(f"{row[0]:>6.0f} {row[1]:>10} {row[2]:>10} {row[3] / 2**20:>14.1f} "
                  f"{(newest.get('checkpointed_size_bytes') or 0) / 2**20:>12.1f} {row[4]:>15.0f}", flush=True)
        ended = time.monotonic()
        output = read_committed(bootstrap, args["output_topic"], expect=total, timeout_s=300, settle_s=0)
        print(f"{backend}: {len(output)} of {total} first visits out, the last {time.monotonic() - ended:.0f} s "
              "after the input ended", flush=True)
        job.stop()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=10_000, help="new keys (records) a second")
    parser.add_argument("--ttl-s", type=int, default=10)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--backends", nargs="+", default=["heap", "rocksdb"], choices=["heap", "rocksdb"])
    options = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-ttl-") as tmp, \
            kafka_or_embedded(Path(tmp) / "broker") as (bootstrap, _):
        for backend in options.backends:
            results[backend] = one_backend(bootstrap, Path(tmp), backend, options.rate, options.minutes,
                                           options.ttl_s, options.sample_s)
    print(f"\nfirst_visits, {options.rate} new keys/s, TTL {options.ttl_s} s, {options.minutes:g} min per backend")
    print(f"{'backend':>8} {'from s':>7} {'to s':>6} {'full size MiB':>20} {'worker RSS MiB':>20}")
    for backend, samples in results.items():
        settled = [s for s in samples if s[0] >= 2 * options.ttl_s and s[3]]
        if not settled:
            print(f"{backend:>8} no checkpoint sampled after {2 * options.ttl_s} s")
            continue
        first, last = settled[0], settled[-1]
        print(f"{backend:>8} {first[0]:>7.0f} {last[0]:>6.0f} "
              f"{first[3] / 2**20:>9.1f} -> {last[3] / 2**20:>7.1f} {first[4]:>9.0f} -> {last[4]:>7.0f}")


if __name__ == "__main__":
    main()
