"""Scale-out of one stage: records/s of the single-stage job with W = 1, 2 and 4 workers, each
worker held to the same CPU quota, as if each had its own machine.

Runs ``url_counts`` (count per URL, exactly-once, one output record per input record) at
parallelism 4 with ``--workers W`` on the local pipeline, rounds interleaved over W on the same
broker. With W > 1 the source stage runs as an exchange reader and the keyed stage
(``runtime.job.physical_plan``), so the job has 2 W worker processes. Throughput is measured from the
moment every worker process has started its query until every result is committed
(read_committed; timed by the results' own Kafka timestamps, written at their commit); the table
gives min / median / max per W over the rounds, the ratio of the medians to W = 1, the median
rate from the first result committed to the last (*first->last*: without the start of the queries
and the first checkpoint's wait, which are the same for every W) and its ratio, the median time
from the start to the first result committed, the share of the machine's CPU time that was busy
meanwhile (all processes, from ``/proc/stat``: what W = 1 leaves for more workers), and the peak resident set (VmHWM,
summed over each worker's process tree: Python driver, JVM, Spark's Python workers) of the
largest worker.

Each worker gets its own CPU quota (``--cpu-per-worker`` CPUs, a Linux cgroup:
:mod:`tidemark.local.cpu_quota`): its process tree, and with W > 1 its exchange reader's beside it
(worker ``n`` is the keyed process ``n`` and the reader ``n``, one machine each), from the moment the
supervisor starts it. W workers so get W times the CPU of one, and the ratio to W = 1 says how the
job scales on machines of its own, not how it shares this one. Beside records/s the table gives the
workers' CPU-seconds per million records (the groups' own accounting, ended processes included),
how often their quota ran out (the share of scheduling periods it held them back in), and the broker's CPU-seconds in the window (the
embedded broker's process; none for a ``KAFKA_BOOTSTRAP_SERVERS`` broker). The quotas must fit the
machine beside the broker and the services: 4 workers at 0.4 CPUs take 1.6 of 2 cores. No warm standbys run (as in ``bench_vs_quix.py``): they are not part of a stage's
throughput.

    .venv/bin/python bench/bench_scaling.py --records 100000 --rounds 3 --workers 1 2 4 --cpu-per-worker 0.4

``--inputs`` names the input variants, each with its own table and ratios: ``round-robin`` (the
default; the records spread over the partitions, so with W > 1 the source stage reads through its
exchange) and ``co-partitioned`` (the same records written by URL into the partitions of their key
groups, ``generator.by_url``, and the job's input declared co-partitioned: each worker reads its own
key groups' partitions, W processes, no exchange; docs/concepts/runtime.md) and ``fused`` (the
round-robin records through the exchange, the workers fused, ``jobs run --fused-workers``: each
exchange reader a lane of its keyed worker's process, W processes).

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.local.cpu_quota import CpuController, CpuQuota, QuotaUnavailable, cpu_controller
from tidemark.examples.generator import by_url, generate, produce
from tidemark.verification.committed_reader import CommittedReader, collect
from tidemark.local.pipeline import LocalPipeline, wait_for
from tidemark.processes import tree_pids

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
            for worker in tree_pids(self.supervisor)[1:]:
                if _cmdline(worker).find("jobs worker") >= 0:
                    tree = sum(_hwm_kib(pid) for pid in tree_pids(worker))
                    self.peak[worker] = max(self.peak.get(worker, 0), tree)
            time.sleep(1.0)


class WorkerQuotas(threading.Thread):
    """Puts each worker process under the supervisor, as soon as it appears, into the quota of its
    worker index (``--worker n``), with what it has started so far; what it starts later is born
    there."""

    def __init__(self, controller: CpuController, supervisor: int, cores: float, run: str) -> None:
        super().__init__(daemon=True)
        self.controller = controller
        self.supervisor = supervisor
        self.cores = cores
        self.run_name = run
        self.quotas: dict[int, CpuQuota] = {}  # worker index -> its group
        self._placed: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            for pid in tree_pids(self.supervisor)[1:]:
                if pid in self._placed:
                    continue
                command = _cmdline(pid).split()
                if "worker" not in command or "--worker" not in command:
                    continue  # not a stage worker (a child of one is placed with it)
                index = int(command[command.index("--worker") + 1])
                if index not in self.quotas:
                    self.quotas[index] = CpuQuota(self.controller, f"{self.run_name}-w{index}", self.cores)
                for member in tree_pids(pid):
                    if self.quotas[index].add(member):
                        self._placed.add(member)
            self.done.wait(0.02)

    def usage_s(self) -> float:
        return sum(quota.usage_s() for quota in self.quotas.values())

    def periods(self) -> tuple[int, int]:
        """(periods, throttled periods) over every worker's group."""
        each = [quota.periods() for quota in self.quotas.values()]
        return sum(p for p, _ in each), sum(t for _, t in each)

    def close(self) -> None:
        self.done.set()
        self.join(timeout=5)
        for quota in self.quotas.values():
            quota.close()


def _process_cpu_s(pid: int | None) -> float:
    """CPU time of one process so far (0 when unknown)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    rate: float  # records/s, from every worker's query started to the last result committed
    steady_rate: float  # records/s from the first result committed to the last
    first_s: float  # seconds from every worker's query started to the first result committed
    busy: float  # share of the machine's CPU busy
    peak_gib: float  # peak RSS of the largest worker's tree
    worker_cpu_s: float  # the workers' quotas' CPU time in the window
    throttled: float  # share of the workers' scheduling periods in which their quota ran out
    broker_cpu_s: float


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


INPUTS = ("round-robin", "fused", "co-partitioned")


def processes(workers: int, variant: str) -> int:
    """The job's worker processes: with W > 1 an exchange reader beside each keyed worker, unless
    the input is co-partitioned or the workers are fused."""
    return workers if workers == 1 or variant != "round-robin" else 2 * workers


def one_round(bootstrap: str, broker_pid: int | None, controller: CpuController, cores: float, root: Path,
              workers: int, records: int, interval_ms: int, variant: str) -> Round:
    co_partitioned = variant == "co-partitioned"
    run = uuid.uuid4().hex[:6]
    home = root / f"w{workers}-{run}"
    args = {"job_id": f"scale-{run}", "input_topic": f"scale-in-{run}", "output_topic": f"scale-out-{run}",
            "parallelism": PARALLELISM, "workers": workers, "co_partitioned": co_partitioned}
    with LocalPipeline(home, bootstrap, topic_prefix=f"scale-{run}", standby=False,
                       env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(interval_ms)}) as pipe:
        pipe.create_topic(args["input_topic"], 4)
        produce(bootstrap, args["input_topic"], generate(records), 4, chunk=10_000,
                partition_of=by_url(4) if co_partitioned else None)
        job = pipe.start_job(JOB, args, fused=variant == "fused" if workers > 1 else None)
        quotas = WorkerQuotas(controller, job.process.pid, cores, f"scale-{run}")
        quotas.start()
        expected = processes(workers, variant)
        wait_for(lambda: len(list((home / "runs").glob("*/*.epoch-1.ready"))) >= expected, 600,
                 f"{expected} worker processes running", poll_s=0.05)
        started_ms, cpu_before = time.time() * 1000, _cpu_jiffies()
        worker_before, periods_before = quotas.usage_s(), quotas.periods()
        broker_before = _process_cpu_s(broker_pid)
        rss = PeakRss(job.process.pid)
        rss.start()
        print(f"  W={workers}: {expected} worker process(es) running; waiting for {records} results ...", flush=True)
        shown = [0.0]

        def all_read(read: list) -> bool:  # asked each time the reader caught up with what is committed
            now = time.monotonic()
            if now - shown[0] >= 5 or len(read) >= records:
                print(f"  W={workers}:   {len(read)} results", flush=True)
                shown[0] = now
            return len(read) >= records

        with CommittedReader({"bootstrap.servers": bootstrap}, args["output_topic"]) as reader:
            if not reader.open(60):
                raise SystemExit(f"bench_scaling: output topic {args['output_topic']} did not appear")
            output = collect(reader, until=all_read, wait_s=600)
        if len(output) < records:
            raise SystemExit(f"bench_scaling: {len(output)} of {records} results within 600 s")
        # the results' own times (written when their checkpoint completed), not when this reader caught up
        stamps = sorted(r.timestamp_ms for r in output)
        first_ms, last_ms = stamps[0], stamps[-1]
        first_count = sum(1 for stamp in stamps if stamp == first_ms)
        elapsed = (last_ms - started_ms) / 1000
        busy, total = (after - before for after, before in zip(_cpu_jiffies(), cpu_before))
        worker_cpu = quotas.usage_s() - worker_before
        periods, throttled = (after - before for after, before in zip(quotas.periods(), periods_before))
        broker_cpu = _process_cpu_s(broker_pid) - broker_before
        rss.done = True
        job.stop()
        quotas.close()
    # nan when every result came with the first commit (a backlog one checkpoint took whole)
    steady = (records - first_count) / ((last_ms - first_ms) / 1000) if last_ms > first_ms else float("nan")
    return Round(records / elapsed, steady, (first_ms - started_ms) / 1000, busy / max(total, 1),
                 max(rss.peak.values(), default=0) / 1024 / 1024, worker_cpu, throttled / max(periods, 1), broker_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--interval-ms", type=int, default=2000)
    parser.add_argument("--cpu-per-worker", type=float, default=0.4,
                        help="CPUs each worker's process tree may use (a cgroup quota)")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=["round-robin"],
                        help="input variants, each with its own table (see the module)")
    options = parser.parse_args()
    if options.cpu_per_worker <= 0:
        parser.error("--cpu-per-worker: needs a share of CPUs above 0")
    try:
        controller = cpu_controller()
    except QuotaUnavailable as exc:
        raise SystemExit(f"bench_scaling: cannot give the workers CPU quotas: {exc}") from None
    rounds: dict[tuple[str, int], list[Round]] = {(i, w): [] for i in options.inputs for w in options.workers}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-scaling-") as tmp, \
            kafka_or_embedded(Path(tmp) / "broker") as (bootstrap, status):
        broker_pid = status.pid if status is not None else None
        for index in range(options.rounds):
            for variant, workers in rounds:
                print(f"round {index + 1}/{options.rounds}, {variant} input, W={workers}", flush=True)
                rounds[variant, workers].append(one_round(
                    bootstrap, broker_pid, controller, options.cpu_per_worker, Path(tmp), workers, options.records,
                    options.interval_ms, variant))
    for variant in options.inputs:
        print_table(options, controller, variant, {w: rounds[variant, w] for w in options.workers})


def _rate(rate: float) -> str:
    return "-" if math.isnan(rate) else f"{rate:.0f}"


def _ratio(rate: float, base: float) -> str:
    return "-" if math.isnan(rate) or math.isnan(base) or base <= 0 else f"{rate / base:.2f}"


def print_table(options: argparse.Namespace, controller: CpuController, variant: str,
                rounds: dict[int, list[Round]]) -> None:
    base = statistics.median(r.rate for r in rounds[options.workers[0]])
    steady_base = statistics.median(r.steady_rate for r in rounds[options.workers[0]])
    print(f"\nurl_counts, {variant} input, parallelism {PARALLELISM}, {options.records} records, {options.rounds} "
          f"round(s), {options.cpu_per_worker} CPUs per worker (cgroup v{controller.version} quota)")
    print(f"{'W':>3} {'processes':>9} {'quota CPUs':>10} {'min rec/s':>10} {'median':>10} {'max':>10} {'ratio':>6} "
          f"{'first->last':>11} {'ratio':>6} {'first result s':>14} {'worker CPU-s/M rec':>18} {'throttled':>9} {'broker CPU-s':>12} {'machine busy':>12} {'peak RSS GiB':>12}")
    for workers in options.workers:
        done = rounds[workers]
        rates = [r.rate for r in done]
        print(f"{workers:>3} {processes(workers, variant):>9} "
              f"{workers * options.cpu_per_worker:>10.1f} "
              f"{min(rates):>10.0f} {statistics.median(rates):>10.0f} {max(rates):>10.0f} "
              f"{statistics.median(rates) / base:>6.2f} "
              f"{_rate(statistics.median(r.steady_rate for r in done)):>11} "
              f"{_ratio(statistics.median(r.steady_rate for r in done), steady_base):>6} "
              f"{statistics.median(r.first_s for r in done):>14.1f} "
              f"{statistics.median(r.worker_cpu_s for r in done) / options.records * 1e6:>18.1f} "
              f"{statistics.median(r.throttled for r in done):>9.0%} "
              f"{statistics.median(r.broker_cpu_s for r in done):>12.1f} "
              f"{statistics.median(r.busy for r in done):>12.0%} {max(r.peak_gib for r in done):>12.2f}")


if __name__ == "__main__":
    main()
