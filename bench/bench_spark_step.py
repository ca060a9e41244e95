"""A Spark step that parses the records against the Python decode path: the same count per URL,
broker, input topic and machine.

Each round writes ``--records`` access-log records (``tidemark.examples.generator``, 4
partitions, no key) to a fresh input topic, then runs ``tidemark.examples.access_log:url_counts``
on it twice, one variant after the other (the order alternates between rounds):

* ``python``: ``spark_step=False``: the worker's Python decodes each record's JSON value (orjson,
  the stage's default decoder) and keys it with a Python function (``text_field("url")``);
* ``step``: ``spark_step=True``: Spark parses each micro-batch with
  ``tidemark.examples.access_log.PARSE_RECORD`` (``from_json`` on the record's schema, ``url`` and
  ``ts`` required) before ``toArrow``, each record's row reaches the function as a dict, and the
  stage is keyed by the ``url`` column.

Both run exactly-once with RocksDB state, ``--parallelism`` tasks in one worker process, no warm
standby, on the local pipeline (the coordinator and checkpoint-store start before the clock), and
checkpoint every ``--commit-interval-ms``. Clocks as ``bench_vs_quix.py`` (one read_committed
consumer watches the output from the launch): records/s from the launch to the last result
committed, and the steady state from the first result committed to the last. Beside them, the
worker's CPU time, read from ``/proc`` every 0.25 s, separately for its Python process and for its
JVM (the ``java`` process under it; anything else under it, such as Spark's Python workers, is
counted as ``other``): CPU-seconds per million records over the whole run (launch -> last result,
start-up included) and over the steady state (the CPU between the first and the last result over
the records committed after the first commit), and the peak resident set of each (``VmHWM``).
Every output is verified as ``bench_vs_quix.py`` does (per URL, hits 1, 2, ..., n with n the
input's count); a mismatch is printed loudly and the script exits 1 after the table. The table
gives min / median / max per variant and the ratio step/python of the medians.

With ``--profile`` (the default) one more run of each variant follows the rounds, not timed, with
``py-spy record`` sampling the worker's Python process from its launch to its last result
(raw collapsed stacks, idle threads left out; py-spy stops the worker for each sample); the summary gives, per variant,
where the samples went: the processing thread's share per part of the record path (Arrow to
Python, decode, key, state, output, ...), and the functions with the most samples of their own.
The raw profiles are kept in ``--profile-dir`` when given.

    .venv/bin/python bench/bench_spark_step.py --records 1500000 --rounds 3

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import math
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.generator import expected_url_counts, generate, produce
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.pipeline import LocalPipeline
from tidemark.processes import die_with_parent, tree_pids

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench/ is not a package: its shared helpers are imported by file name

from bench_scaling import _cmdline, _hwm_kib, _process_cpu_s  # noqa: E402
from bench_vs_quix import PARTITIONS, BenchError, Run, _rate, problems_of, watch_output  # noqa: E402

JOB = "tidemark.examples.access_log:url_counts"
VARIANTS = ("python", "step")
SAMPLE_EVERY_S = 0.25


# --- the worker's CPU time and memory ------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    """The worker's CPU time so far (seconds) at ``at_s`` from the launch."""

    at_s: float
    python_s: float
    jvm_s: float
    other_s: float


def cpu_at(samples: list[Sample], at_s: float) -> Sample:
    """The CPU times at ``at_s``, interpolated between the samples around it (the first or last
    sample outside them)."""
    if not samples:
        return Sample(at_s, 0.0, 0.0, 0.0)
    if at_s <= samples[0].at_s:
        return samples[0]
    for before, after in zip(samples, samples[1:]):
        if before.at_s <= at_s <= after.at_s:
            share = (at_s - before.at_s) / (after.at_s - before.at_s) if after.at_s > before.at_s else 1.0
            return Sample(at_s, *(b + share * (a - b) for b, a in ((before.python_s, after.python_s),
                                                                    (before.jvm_s, after.jvm_s),
                                                                    (before.other_s, after.other_s))))
    return samples[-1]


class WorkerSampler(threading.Thread):
    """Samples the CPU time of the stage worker under the supervisor (its Python process, its
    JVM, the rest of its tree) and the peak resident set of its Python process and of its JVM."""

    def __init__(self, supervisor: int, launched: float) -> None:
        super().__init__(daemon=True, name="worker-sampler")
        self.supervisor = supervisor
        self.launched = launched
        self.worker: int | None = None
        self.samples: list[Sample] = []
        self.peak_kib = {"python": 0, "jvm": 0}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(SAMPLE_EVERY_S)

    def find_worker(self) -> int | None:
        if self.worker is None:
            workers = [pid for pid in tree_pids(self.supervisor)[1:] if "jobs worker" in _cmdline(pid)]
            self.worker = workers[0] if workers else None
        return self.worker

    def sample(self) -> None:
        worker = self.find_worker()
        if worker is None:
            return
        jvm = other = 0.0
        for pid in tree_pids(worker)[1:]:
            if "java" in _cmdline(pid).split(" ", 1)[0]:
                jvm += _process_cpu_s(pid)
                self.peak_kib["jvm"] = max(self.peak_kib["jvm"], _hwm_kib(pid))
            else:
                other += _process_cpu_s(pid)
        python = _process_cpu_s(worker)
        self.peak_kib["python"] = max(self.peak_kib["python"], _hwm_kib(worker))
        if python > 0:
            self.samples.append(Sample(time.monotonic() - self.launched, python, jvm, other))

    def stop(self) -> None:
        """One last sample, then stop."""
        self.sample()
        self.done.set()
        self.join(timeout=5)


# --- one run ---------------------------------------------------------------------------------------

@dataclass
class StepRun(Run):
    """One run of a variant (``system``): the clocks, the worker's CPU at the first and the last
    result (seconds from its start), its peak resident sets."""

    at_first: Sample = field(default_factory=lambda: Sample(0.0, 0.0, 0.0, 0.0))
    at_last: Sample = field(default_factory=lambda: Sample(0.0, 0.0, 0.0, 0.0))
    peak_python_kib: int = 0
    peak_jvm_kib: int = 0

    def cpu_per_million(self, part: str) -> float:
        """CPU-seconds of ``part`` (python, jvm, other) per million records, launch -> last result."""
        return getattr(self.at_last, f"{part}_s") / self.records * 1e6

    def steady_cpu_per_million(self, part: str) -> float:
        """CPU-seconds of ``part`` per million of the records committed after the first commit,
        between the first result and the last; NaN when the first commit held them all."""
        after_first = self.records - self.clocks.at_first
        if after_first <= 0 or self.clocks.last_s <= self.clocks.first_s:
            return float("nan")
        spent = getattr(self.at_last, f"{part}_s") - getattr(self.at_first, f"{part}_s")
        return spent / after_first * 1e6


def job_args(variant: str, run_id: str, input_topic: str, output: str, options: argparse.Namespace) -> dict:
    """The arguments of ``url_counts``: the same job for both variants but for ``spark_step``."""
    return {"job_id": f"bss-{variant}-{run_id}", "input_topic": input_topic, "output_topic": output,
            "parallelism": options.parallelism, "workers": 1, "state_backend": options.state_backend,
            "mode": "EXACTLY_ONCE", "spark_step": variant == "step"}


# The worker's JVM: "production" as the image and the chart run it (the settings' defaults), or
# "quick-start" as the demo and the tests do (tidemark.local.quick_start: a JVM that lives minutes)
JVM_SETTINGS = {"production": {"TIDEMARK_SPARK__JAVA_OPTIONS": "", "TIDEMARK_SPARK__CONF": "{}"},
                "quick-start": {}}


def run_variant(bootstrap: str, home: Path, variant: str, input_topic: str, records: int,
                expected: dict[str, int], options: argparse.Namespace, label: str,
                profile: Path | None = None) -> StepRun:
    """One run of ``variant``; with ``profile``, py-spy records the worker into that file."""
    run_id = uuid.uuid4().hex[:6]
    output = f"bss-{variant}-out-{run_id}"
    print(f"  [{label}] starting the coordinator and checkpoint-store (not timed)", flush=True)
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(options.commit_interval_ms), **JVM_SETTINGS[options.jvm]}
    with LocalPipeline(home / f"{variant}-{run_id}", bootstrap, topic_prefix=f"bss-{run_id}", standby=False,
                       env=env) as pipe:
        launched = time.monotonic()
        job = pipe.start_job(JOB, job_args(variant, run_id, input_topic, output, options))
        sampler = WorkerSampler(job.process.pid, launched)
        sampler.start()
        print(f"  [{label}] launched `tidemark jobs run {JOB}` (spark_step={variant == 'step'}, parallelism "
              f"{options.parallelism}, one worker)", flush=True)
        spy = None
        try:
            if profile is not None:
                spy = start_py_spy(sampler, profile, launched, lambda: job.process.poll() is None, label,
                                   options.timeout_s)
            clocks, values = watch_output(bootstrap, output, records, launched,
                                          lambda: job.process.poll() is None, label, options.timeout_s)
        except BenchError as error:
            raise BenchError(f"{error}; log: {job.log_path}") from None
        finally:
            sampler.stop()
            if spy is not None:
                stop_py_spy(spy, label)
        job.stop()
    run = StepRun(variant, records, clocks, problems_of(values, expected),
                  at_first=cpu_at(sampler.samples, clocks.first_s), at_last=cpu_at(sampler.samples, clocks.last_s),
                  peak_python_kib=sampler.peak_kib["python"], peak_jvm_kib=sampler.peak_kib["jvm"])
    return run


# --- py-spy ---------------------------------------------------------------------------------------------

def py_spy() -> Path:
    """py-spy beside this Python (the project's venv), else on the PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    found = beside if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise BenchError("py-spy not found (beside this Python or on the PATH): `pip install py-spy`, or --no-profile")
    return Path(found)


def start_py_spy(sampler: WorkerSampler, out: Path, launched: float, alive: Callable[[], bool], label: str,
                 timeout_s: float) -> subprocess.Popen[bytes]:
    """``py-spy record`` on the worker's Python process as soon as it is there (raw collapsed
    stacks, one root frame per thread). py-spy stops the worker for each sample (its default):
    ``--nonblocking`` stacks, read from the running process, misplaced time (bench/README.md)."""
    while sampler.find_worker() is None:
        if not alive() or time.monotonic() - launched > timeout_s:
            raise BenchError(f"{label}: no worker process to profile")
        time.sleep(0.05)
    command = [str(py_spy()), "record", "--pid", str(sampler.worker), "--format", "raw", "--threads",
               "--rate", "100", "--output", str(out)]
    log = open(out.with_suffix(".log"), "wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               preexec_fn=die_with_parent)
    log.close()
    print(f"  [{label}] py-spy recording worker {sampler.worker} into {out.name}", flush=True)
    return process


def stop_py_spy(process: subprocess.Popen[bytes], label: str) -> None:
    """SIGINT: py-spy writes what it sampled and exits."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        print(f"  [{label}] py-spy did not exit on SIGINT: killed (its profile may be missing)", flush=True)


PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # (part of the record path, what its frames hold); a sample is the part of the frame nearest its leaf that
    # names one, so a function's callees count as that function's part unless they name a part themselves
    ("Arrow -> records (columns, rows, InputRecord)", ("records_of (", "stepped_records", "row_dicts (",
                                                       "micro_batch_records (")),
    ("decode (orjson)", ("json_decode (",)),
    ("key and key group", (".key (", "task_index (", "key_group")),
    ("state (RocksDB value state)", ("tidemark/state/", "set_current_key")),
    ("output encoding (json_encode)", ("json_encode (", "encoded (")),
    ("output buffering and Kafka writes", ("emit (", "tidemark/runtime/worker/outputs.py", "flush_outputs", "kafka/")),
    ("checkpoints", ("checkpoint", "snapshot")),
    ("control plane, metrics", ("control.py", "metrics", "prometheus")),
    ("record path and operator (own time)", ("inputs.py", "task.py", "keyed_process.py", "access_log.py",
                                              "runner.py", "clock.py")),
)
PROCESSING_THREAD = "batches-"  # the thread that processes the micro-batches (runtime.worker.batch_handoff)
FOREACH_BATCH = "on_batch (tidemark/runtime/worker/query.py"  # Spark's callback: the step, toArrow


@dataclass
class Profile:
    """A py-spy raw profile (``--threads``): samples per stack, root first, the thread as its first
    frame (``thread (tid): name``)."""

    stacks: Counter[tuple[str, ...]]

    @classmethod
    def parse(cls, lines: Iterable[str]) -> Profile:
        stacks: Counter[tuple[str, ...]] = Counter()
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                stacks[tuple(stack.split(";"))] += int(count)
        return cls(stacks)

    @property
    def total(self) -> int:
        return sum(self.stacks.values())

    def threads(self) -> Counter[str]:
        """Samples per thread, by its name."""
        found: Counter[str] = Counter()
        for stack, count in self.stacks.items():
            found[thread_name(stack[0])] += count
        return found

    def processing_thread(self) -> str:
        """The name of the thread that processes the batches (else the busiest)."""
        threads = self.threads()
        named = [name for name in threads if name.startswith(PROCESSING_THREAD)]
        return named[0] if named else (threads.most_common(1)[0][0] if threads else "")

    def parts(self, thread: str) -> Counter[str]:
        """Samples of ``thread`` per part of the record path (:data:`PARTS`), the rest as ``other``."""
        found: Counter[str] = Counter()
        for stack, count in self.stacks.items():
            if thread_name(stack[0]) == thread:
                found[part_of(stack)] += count
        return found

    def own(self, thread: str) -> Counter[str]:
        """Samples of ``thread`` per leaf frame (a function's own time)."""
        found: Counter[str] = Counter()
        for stack, count in self.stacks.items():
            if thread_name(stack[0]) == thread:
                found[short_frame(stack[-1])] += count
        return found

    def foreach_batch(self, thread: str) -> int:
        """Samples in Spark's ``foreachBatch`` callback (the step's collect, ``toArrow``) outside ``thread``."""
        return sum(count for stack, count in self.stacks.items()
                   if thread_name(stack[0]) != thread and any(FOREACH_BATCH in frame for frame in stack))


def thread_name(frame: str) -> str:
    """``thread (1234): batches-x`` as ``batches-x``."""
    return frame.split("): ", 1)[1] if frame.startswith("thread (") and "): " in frame else frame


def part_of(stack: tuple[str, ...]) -> str:
    for frame in reversed(stack[1:]):
        for part, names in PARTS:
            if any(name in frame for name in names):
                return part
    return "other"


def short_frame(frame: str) -> str:
    """``function (path/to/file.py:line)`` as ``function (file.py)``."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if file else name


def profile_summary(variant: str, profile: Profile, top: int = 12) -> list[str]:
    """Where the worker's Python samples went: per thread, the processing thread's parts of the
    record path and its functions with the most samples of their own, and Spark's callback."""
    total = profile.total
    if not total:
        return [f"{variant}: no samples"]
    lines = [f"{variant}: {total} samples of the worker's Python process (100 Hz, active threads only)"]
    threads = profile.threads()
    lines.append("  threads: " + ", ".join(f"{name} {count / total:.0%}" for name, count in threads.most_common(6)))
    processing = profile.processing_thread()
    in_thread = threads[processing] or 1
    lines.append(f"  {processing}, by part of the record path ({in_thread} samples):")
    for part, count in profile.parts(processing).most_common():
        lines.append(f"    {count / in_thread:6.1%}  {part}")
    lines.append(f"  {processing}, own samples (top {top}):")
    for frame, count in profile.own(processing).most_common(top):
        lines.append(f"    {count / in_thread:6.1%}  {frame}")
    lines.append(f"  Spark's foreachBatch callback (the step's collect, toArrow), other threads: "
                 f"{profile.foreach_batch(processing)} samples ({profile.foreach_batch(processing) / total:.0%})")
    return lines


# --- the table -----------------------------------------------------------------------------------------

METRICS: tuple[tuple[str, Callable[[StepRun], float], Callable[[float], str]], ...] = (
    ("records/s launch -> last result", lambda r: r.end_to_end, _rate),
    ("records/s first -> last result", lambda r: r.steady, _rate),
    ("Python CPU-s / M records (run)", lambda r: r.cpu_per_million("python"), lambda v: _fixed(v, 1)),
    ("JVM CPU-s / M records (run)", lambda r: r.cpu_per_million("jvm"), lambda v: _fixed(v, 1)),
    ("Python CPU-s / M records (first -> last)", lambda r: r.steady_cpu_per_million("python"), lambda v: _fixed(v, 1)),
    ("JVM CPU-s / M records (first -> last)", lambda r: r.steady_cpu_per_million("jvm"), lambda v: _fixed(v, 1)),
    ("other CPU-s / M records (run)", lambda r: r.cpu_per_million("other"), lambda v: _fixed(v, 1)),
    ("peak RSS Python MiB", lambda r: r.peak_python_kib / 1024, lambda v: _fixed(v, 0)),
    ("peak RSS JVM MiB", lambda r: r.peak_jvm_kib / 1024, lambda v: _fixed(v, 0)),
)


def _fixed(value: float, digits: int) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"


def table(runs: list[StepRun]) -> list[str]:
    """Per metric and variant: min / median / max over the runs (those with a value), and on the
    step's row the ratio step/python of the medians."""
    lines = [f"{'metric':<42} {'variant':<7} {'runs':>4} {'min':>9} {'median':>9} {'max':>9} {'step/python':>11}"]
    for metric, measure, show in METRICS:
        medians: dict[str, float] = {}
        for variant in VARIANTS:
            values = [v for v in (measure(r) for r in runs if r.system == variant) if not math.isnan(v)]
            medians[variant] = statistics.median(values) if values else float("nan")
            low, high = (min(values), max(values)) if values else (float("nan"),) * 2
            ratio = ""
            if variant == "step":
                base = medians["python"]
                ratio = "n/a" if math.isnan(base) or base == 0 or math.isnan(medians["step"]) \
                    else f"{medians['step'] / base:.2f}"
            lines.append(f"{metric:<42} {variant:<7} {len(values):>4} {show(low):>9} {show(medians[variant]):>9} "
                         f"{show(high):>9} {ratio:>11}")
    return lines


def describe(run: StepRun) -> str:
    verdict = "output verified" if not run.problems else "OUTPUT MISMATCH"
    return (f"{run.end_to_end:,.0f} rec/s from launch (last result at {run.clocks.last_s:.1f} s), "
            f"{_rate(run.steady)} rec/s first -> last (first result at {run.clocks.first_s:.1f} s, "
            f"{run.clocks.at_first} in the first commit); worker CPU-s per M records: Python "
            f"{run.cpu_per_million('python'):.1f}, JVM {run.cpu_per_million('jvm'):.1f}; {verdict}")


def round_order(index: int) -> tuple[str, ...]:
    """The variants' order in round ``index`` (from 0): alternating, so neither always runs first."""
    return VARIANTS if index % 2 == 0 else tuple(reversed(VARIANTS))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parallelism", type=int, default=PARTITIONS, help="the stage's tasks (one worker)")
    parser.add_argument("--state-backend", choices=("rocksdb", "heap"), default="rocksdb",
                        help="the same for both variants")
    parser.add_argument("--commit-interval-ms", type=int, default=2000, help="the checkpoint interval")
    parser.add_argument("--profile", action=argparse.BooleanOptionalAction, default=True,
                        help="one more run per variant with py-spy on the worker (not timed)")
    parser.add_argument("--profile-dir", type=Path, default=None, help="where to keep the raw py-spy profiles")
    parser.add_argument("--timeout-s", type=float, default=1800, help="per run, from the launch")
    parser.add_argument("--jvm", choices=tuple(JVM_SETTINGS), default="production",
                        help="the worker's JVM as a deployment runs it (the C2 compiler, Spark's whole-stage code "
                             "generation), or as the local pipeline's quick start does (C1 only, no code generation)")
    options = parser.parse_args()
    for name in ("records", "rounds", "parallelism", "commit_interval_ms"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-spark-step-"))
    runs: list[StepRun] = []
    profiles: dict[str, Profile] = {}
    failed: list[str] = []
    try:
        if options.profile:
            py_spy()  # before the rounds: a missing py-spy fails now, not after them
        with kafka_or_embedded(home / "broker") as (bootstrap, broker):
            print(f"broker: {'external ' + bootstrap if broker is None else 'embedded ' + broker.describe()}",
                  flush=True)
            data = list(generate(options.records))
            expected = expected_url_counts(data)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for index in range(options.rounds + (1 if options.profile else 0)):
                profiling = index == options.rounds
                input_topic = f"bss-in-{uuid.uuid4().hex[:6]}"
                what = "profiles (py-spy, not timed)" if profiling else f"round {index + 1}/{options.rounds}"
                print(f"{what}: writing {options.records} records to {input_topic} ({PARTITIONS} partitions)",
                      flush=True)
                ensure_topics(admin, [TopicSpec(input_topic, PARTITIONS)])
                produce(bootstrap, input_topic, data, PARTITIONS, chunk=10_000)
                for variant in round_order(index):
                    label = f"{variant} {'profile' if profiling else f'r{index + 1}'}"
                    out = home / f"py-spy-{variant}.txt" if profiling else None
                    run = run_variant(bootstrap, home, variant, input_topic, options.records, expected, options,
                                      label, profile=out)
                    print(f"  [{label}] {describe(run)}", flush=True)
                    for problem in run.problems[:10]:
                        print(f"  [{label}] MISMATCH: {problem}", flush=True)
                    if profiling:
                        assert out is not None
                        if run.problems:
                            failed.append(f"{variant} (profiled)")  # fails the benchmark as a timed run's would
                        if out.exists():
                            profiles[variant] = Profile.parse(out.read_text(errors="replace").splitlines())
                            if options.profile_dir is not None:
                                options.profile_dir.mkdir(parents=True, exist_ok=True)
                                shutil.copy(out, options.profile_dir / out.name)
                        else:
                            print(f"  [{label}] py-spy wrote no profile (see {out.with_suffix('.log')})", flush=True)
                    else:
                        runs.append(run)
    except BenchError as error:
        print(f"bench_spark_step: {error} (working directory kept: {home})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bench_spark_step: interrupted (working directory kept: {home})", file=sys.stderr)
        return 130
    shutil.rmtree(home, ignore_errors=True)
    print(f"\ncount per URL, {options.records} records on {PARTITIONS} partitions, exactly-once, "
          f"{options.state_backend} state, commit interval {options.commit_interval_ms} ms, parallelism "
          f"{options.parallelism} in one worker, {options.rounds} interleaved round(s), the {options.jvm} JVM; "
          f"python: orjson decode and "
          f"a Python key function, step: PARSE_RECORD (from_json) and the url column as the key")
    for line in table(runs):
        print(line)
    for variant in VARIANTS:
        if variant in profiles:
            print()
            for line in profile_summary(variant, profiles[variant]):
                print(line)
    mismatched = [f"{r.system}" for r in runs if r.problems] + failed
    if mismatched:
        print(f"\nOUTPUT MISMATCH in {len(mismatched)} run(s) ({', '.join(mismatched)}): the figures above are not "
              f"comparable", file=sys.stderr)
        return 1
    print("\nevery output verified: the last hits per URL equal the input's counts (and each URL's hits run 1..n)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
