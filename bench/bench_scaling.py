"""Scale-out of one stage: records/s of the single-stage job with W = 1, 2 and 4 worker processes.

Runs ``url_counts`` (count per URL, exactly-once, one output record per input record) at
parallelism 4 with ``--workers W`` on the local pipeline, rounds interleaved over W on the same
broker. With W > 1 the source stage runs as an exchange reader and the keyed stage
(``runtime.job.physical_plan``), so the job has 2 W worker processes. Throughput is measured from the
moment every worker process has started its query until every result is committed
(read_committed); the table gives min / median / max per W over the rounds, the ratio of the
medians to W = 1, the share of the machine's CPU time that was busy meanwhile (all processes,
from ``/proc/stat``: what W = 1 leaves for more workers), and the peak resident set (VmHWM,
summed over each worker's process tree: Python driver, JVM, Spark's Python workers) of the
largest worker. No warm standbys run (as in ``bench_vs_quix.py``): they are not part of a stage's
throughput.

    .venv/bin/python bench/bench_scaling.py --records 100000 --rounds 3 --workers 1 2 4

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.generator import generate, produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import LocalPipeline, process_tree, wait_for

JOB = "tidemark.examples.access_log:url_counts"
PARALLELISM = 4


def _hwm_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class PeakRss(threading.Thread):
    """Samples the peak resident set of every worker process tree under the supervisor."""

    def __init__(self, supervisor: int) -> None:
        super().__init__(daemon=True)
        self.supervisor = supervisor
        self.peak: dict[int, int] = {}  # worker pid -> peak KiB of its tree
        self.done = False

    def run(self) -> None:
        while not self.done:
            for worker in process_tree(self.supervisor)[1:]:
                if _cmdline(worker).find("jobs worker") >= 0:
                    tree = sum(_hwm_kib(pid) for pid in process_tree(worker))
                    self.peak[worker] = max(self.peak.get(worker, 0), tree)
            time.sleep(1.0)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the machine so far, all cores (``/proc/stat``)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def one_round(bootstrap: str, root: Path, workers: int, records: int,
              interval_ms: int) -> tuple[float, float, float]:
    run = uuid.uuid4().hex[:6]
    home = root / f"w{workers}-{run}"
    args = {"job_id": f"scale-{run}", "input_topic": f"scale-in-{run}", "output_topic": f"scale-out-{run}",
            "parallelism": PARALLELISM, "workers": workers}
    with LocalPipeline(home, bootstrap, topic_prefix=f"scale-{run}", standby=False,
                       env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(interval_ms)}) as pipe:
        pipe.create_topic(args["input_topic"], 4)
        produce(bootstrap, args["input_topic"], generate(records), 4, chunk=10_000)
        job = pipe.start_job(JOB, args)
        expected = 1 if workers == 1 else 2 * workers
        wait_for(lambda: len(list((home / "runs").glob("*/*.epoch-1.ready"))) >= expected, 600,
                 f"{expected} worker processes running", poll_s=0.05)
        started, cpu_before = time.monotonic(), _cpu_jiffies()
        rss = PeakRss(job.process.pid)
        rss.start()
        print(f"  W={workers}: {expected} worker process(es) running; waiting for {records} results ...", flush=True)
        output: list = []
        while len(output) < records:
            output = read_committed(bootstrap, args["output_topic"], expect=records, timeout_s=20, settle_s=0)
            print(f"  W={workers}:   {len(output)} results", flush=True)
        elapsed = time.monotonic() - started
        busy, total = (after - before for after, before in zip(_cpu_jiffies(), cpu_before))
        rss.done = True
        job.stop()
    return records / elapsed, busy / max(total, 1), max(rss.peak.values(), default=0) / 1024 / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--interval-ms", type=int, default=2000)
    options = parser.parse_args()
    rates: dict[int, list[float]] = {w: [] for w in options.workers}
    peaks: dict[int, list[float]] = {w: [] for w in options.workers}
    busy: dict[int, list[float]] = {w: [] for w in options.workers}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-scaling-") as tmp, \
            kafka_or_embedded(Path(tmp) / "broker") as (bootstrap, _):
        for index in range(options.rounds):
            for workers in options.workers:
                print(f"round {index + 1}/{options.rounds}, W={workers}", flush=True)
                rate, cpu, peak = one_round(bootstrap, Path(tmp), workers, options.records, options.interval_ms)
                rates[workers].append(rate)
                busy[workers].append(cpu)
                peaks[workers].append(peak)
    base = statistics.median(rates[options.workers[0]])
    print(f"\nurl_counts, parallelism {PARALLELISM}, {options.records} records, {options.rounds} round(s)")
    print(f"{'W':>3} {'processes':>9} {'min rec/s':>10} {'median':>10} {'max':>10} {'ratio':>6} "
          f"{'CPU busy':>9} {'peak RSS GiB':>13}")
    for workers in options.workers:
        values = rates[workers]
        print(f"{workers:>3} {1 if workers == 1 else 2 * workers:>9} {min(values):>10.0f} "
              f"{statistics.median(values):>10.0f} {max(values):>10.0f} {statistics.median(values) / base:>6.2f} "
              f"{statistics.median(busy[workers]):>9.0%} {max(peaks[workers]):>13.2f}")


if __name__ == "__main__":
    main()
