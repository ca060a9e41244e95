"""Tidemark against Quix Streams: the same count per URL, broker, input topic and machine.

For each of the ``--records`` sizes (several in one run: one table each), each round writes that
many access-log records (``tidemark.examples.generator``, 4 partitions) to a fresh input topic of
each ``--inputs`` kind: ``unkeyed`` (no key, round-robin: Quix must re-key by URL through a
repartition topic) and ``keyed`` (keyed by URL, each URL in the partition of its key: Quix's best
case, counted as it is), then runs on it, one after the other:

* Tidemark: ``tidemark.examples.access_log:url_counts`` (exactly-once, RocksDB state,
  ``--parallelism`` tasks in ``--workers`` worker processes, no warm standby) on the local
  pipeline; the coordinator and checkpoint-store run only during Tidemark's turn; with
  ``--warm-workers``, ``tidemark jobs warm-workers`` starts the worker processes before the launch
  (not timed, as the services: a machine's pool of started workers), and the job takes them;
* Quix Streams (``bench/quix_count_per_url.py``: ``group_by("url")`` on the unkeyed input, none
  on the keyed one, a count in its RocksDB state, ``processing_guarantee="exactly-once"``), run
  with the Python of a benchmark-only
  environment, ``.venv-bench-quix/``, which this script creates once from
  ``bench/requirements-quix.txt`` (Quix is never a dependency of the project).

Both write ``{"url", "hits"}`` for every input record and commit every ``--commit-interval-ms``
(Tidemark's checkpoint interval, Quix's ``commit_interval``). One read_committed consumer watches
the output topic from the moment the process is launched and gives two clocks: records/s from the
launch to the last result committed (start-up included), and the steady state: the results
committed after the first commit over the time from the first result committed to the last (a run
whose first commit holds every result has no steady rate and is left out of that clock). Every
output is verified: the hits of each URL must run 1, 2, ..., n with n its count in the input, so
the last hits value per URL equals the input's count; a mismatch is printed loudly and the script
exits 1. The working directory (broker, logs, state) is removed after a run that succeeded and
kept, and named, after one that failed. Rounds interleave the systems (Tidemark, Quix, Tidemark,
...); the table gives min / median / max per input kind, system and clock, the first result's
time after the launch, and the ratios of the medians per input kind.

    .venv/bin/python bench/bench_vs_quix.py --records 300000 1500000 --rounds 3 --warm-workers

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.generator import expected_url_counts, generate, produce, url_key
from tidemark.examples.verify import verify_url_counts
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.pipeline import LocalPipeline
from tidemark.processes import die_with_parent, stop_process
from tidemark.verification.committed_reader import CommittedReader

REPO = Path(__file__).resolve().parent.parent
QUIX_ENV = REPO / ".venv-bench-quix"
QUIX_REQUIREMENTS = REPO / "bench" / "requirements-quix.txt"
QUIX_APP = REPO / "bench" / "quix_count_per_url.py"
JOB = "tidemark.examples.access_log:url_counts"
PARTITIONS = 4
SYSTEMS = ("tidemark", "quix")
INPUTS = ("unkeyed", "keyed")  # round-robin without a key; keyed by URL (Quix's best case)
PROGRESS_EVERY_S = 5.0


class BenchError(Exception):
    """Something the run cannot go on from; printed as one line."""


# --- the benchmark-only environment ---------------------------------------------------------------

def quix_python() -> Path:
    """The Python of ``.venv-bench-quix/`` with the pinned Quix Streams; created or brought up to
    ``requirements-quix.txt`` when its stamp (a digest of that file) differs."""
    python = QUIX_ENV / "bin" / "python"
    stamp = QUIX_ENV / ".bench-installed"
    digest = hashlib.sha256(QUIX_REQUIREMENTS.read_bytes()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    if not python.exists():
        print(f"quix env: creating {QUIX_ENV.relative_to(REPO)}/ (benchmark-only, once)", flush=True)
        _run_streamed([sys.executable, "-m", "venv", str(QUIX_ENV)], "creating the venv")
    print(f"quix env: pip install -r {QUIX_REQUIREMENTS.relative_to(REPO)} ...", flush=True)
    _run_streamed([str(python), "-m", "pip", "install", "--progress-bar", "off", "--disable-pip-version-check",
                   "-r", str(QUIX_REQUIREMENTS)], "pip install",
                  show=lambda line: line.startswith(("Collecting", "Downloading", "Installing", "Successfully",
                                                     "Requirement already satisfied: quixstreams")))
    stamp.write_text(digest + "\n")
    print("quix env: ready", flush=True)
    return python


def quix_version() -> str:
    """The pinned version in ``requirements-quix.txt``."""
    pins = [line.split("==")[1].strip() for line in QUIX_REQUIREMENTS.read_text().splitlines()
            if line.startswith("quixstreams==")]
    return pins[0] if pins else "?"


def _run_streamed(command: list[str], what: str, show: Callable[[str], bool] = lambda line: True,
                  env: dict[str, str] | None = None, prefix: str = "quix env:") -> None:
    """Run ``command``, printing the lines ``show`` picks as progress; BenchError with the tail of
    its output when it fails."""
    lines: list[str] = []
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line.rstrip())
        if show(line):
            print(f"{prefix}   {line.rstrip()}", flush=True)
    if process.wait() != 0:
        tail = " | ".join(lines[-5:])
        raise BenchError(f"{what} failed (exit {process.returncode}): {tail}")


# --- one run -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clocks:
    """When results became visible (read_committed), in seconds from the process launch."""

    first_s: float  # the first result
    last_s: float  # the last one
    at_first: int  # results visible at ``first_s`` (the first commit; more if it caught another)


@dataclass
class Run:
    system: str
    records: int
    clocks: Clocks
    problems: list[str]
    inputs: str = "unkeyed"  # of INPUTS

    @property
    def end_to_end(self) -> float:
        """Records/s from the launch to the last result committed."""
        return self.records / self.clocks.last_s

    @property
    def steady(self) -> float:
        """Records/s of the results committed after the first commit, over the time from the first
        result to the last; NaN when the first commit held them all."""
        after_first = self.records - self.clocks.at_first
        span = self.clocks.last_s - self.clocks.first_s
        return after_first / span if after_first > 0 and span > 0 else float("nan")


def watch_output(bootstrap: str, topic: str, records: int, launched: float, alive: Callable[[], bool],
                 label: str, timeout_s: float, stall_s: float | None = None) -> tuple[Clocks, list[dict[str, Any]]]:
    """Read ``topic`` (read_committed, from offset 0) until ``records`` results are committed;
    the clocks and the results. BenchError when the process dies (``alive()`` false) or
    ``timeout_s`` passes first. ``stall_s``: stop waiting once no result came for that long after
    the first one and return what came (a short output, which the caller's verification reports)."""
    deadline = launched + timeout_s
    reported = time.monotonic()
    values: list[bytes] = []  # decoded after the clock stops: the watcher shares the machine
    first: float | None = None
    newest = 0.0  # when the last batch of results came
    at_first = 0
    with CommittedReader({"bootstrap.servers": bootstrap}, topic) as reader:
        while not reader.open(1.0):
            _check(alive, deadline, label, f"output topic {topic} not created")
            if time.monotonic() - reported >= PROGRESS_EVERY_S:
                reported = time.monotonic()
                print(f"  [{label}] {reported - launched:6.1f} s: starting", flush=True)
        while len(values) < records:
            batch = reader.poll(0.2)
            now = time.monotonic()
            values.extend(r.value for r in batch if r.value is not None)
            if batch:
                newest = now
            if batch and first is None:
                first = now
                drain_until = now + 5.0  # the rest of what was committed by then: not steady-state work
                while not reader.at_end and time.monotonic() < drain_until:
                    values.extend(r.value for r in reader.poll(0.2) if r.value is not None)
                at_first = len(values)
            if now - reported >= PROGRESS_EVERY_S:
                reported = now
                print(f"  [{label}] {now - launched:6.1f} s: {len(values)}/{records} results committed", flush=True)
            if len(values) < records:
                if stall_s is not None and first is not None and now - newest > stall_s:
                    print(f"  [{label}] no result for {stall_s:g} s: stopped waiting at {len(values)}/{records}",
                          flush=True)
                    break
                _check(alive, deadline, label, f"{len(values)}/{records} results committed")
        last = newest if at_first < len(values) else first  # else: all visible at the first result
        # a short look past the end, so that duplicates committed right after show up in the check
        settle_until = time.monotonic() + 2.0
        while time.monotonic() < settle_until:
            values.extend(r.value for r in reader.poll(0.2) if r.value is not None)
    assert first is not None
    return Clocks(first - launched, last - launched, at_first), [json.loads(value) for value in values]


def _check(alive: Callable[[], bool], deadline: float, label: str, state: str) -> None:
    if not alive():
        raise BenchError(f"{label}: the process exited before the last result ({state})")
    if time.monotonic() > deadline:
        raise BenchError(f"{label}: timed out ({state})")


def problems_of(values: list[dict[str, Any]], expected: dict[str, int]) -> list[str]:
    """What is wrong with one output: the last hits value per URL against the input's counts, then
    the whole sequence 1..n per URL (duplicates, gaps, wrong values)."""
    last: dict[str, int] = {}
    for value in values:
        last[value["url"]] = int(value["hits"])
    found = [f"{url}: last hits {last.get(url)} != {n} in the input"
             for url, n in sorted(expected.items()) if last.get(url) != n]
    found += [f"{url}: in the output, not in the input" for url in sorted(set(last) - set(expected))]
    verdict = verify_url_counts(values, expected)
    return found + ([] if verdict.exactly_once else verdict.details)


def run_tidemark(bootstrap: str, home: Path, input_topic: str, records: int, expected: dict[str, int],
                 options: argparse.Namespace, label: str) -> Run:
    run_id = uuid.uuid4().hex[:6]
    output = f"vsq-tidemark-out-{run_id}"
    args = {"job_id": f"vsq-{run_id}", "input_topic": input_topic, "output_topic": output,
            "parallelism": options.parallelism, "workers": options.workers, "state_backend": "rocksdb",
            "mode": "EXACTLY_ONCE"}
    print(f"  [{label}] starting the coordinator and checkpoint-store (not timed)", flush=True)
    env = {"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(options.commit_interval_ms)}
    idle = home / f"idle-{run_id}"
    if options.warm_workers:
        env["TIDEMARK_IDLE_WORKERS__DIR"] = str(idle)
    with LocalPipeline(home / f"tidemark-{run_id}", bootstrap, topic_prefix=f"vsq-{run_id}", standby=False,
                       env=env) as pipe:
        if options.warm_workers:
            print(f"  [{label}] starting {options.workers} worker process(es) (not timed)", flush=True)
            _run_streamed([sys.executable, "-m", "tidemark.cli", "jobs", "warm-workers", "--count",
                           str(options.workers), "--keep-s", "600"], "tidemark jobs warm-workers",
                          env=pipe.command_env(), prefix="   ")
        launched = time.monotonic()
        job = pipe.start_job(JOB, args)
        print(f"  [{label}] launched `tidemark jobs run {JOB}` (parallelism {options.parallelism}, "
              f"workers {options.workers})", flush=True)
        try:
            clocks, values = watch_output(bootstrap, output, records, launched,
                                          lambda: job.process.poll() is None, label, options.timeout_s)
        except BenchError as error:
            raise BenchError(f"{error}; log: {job.log_path}") from None
        finally:
            job.stop()
            for registration in idle.glob("*/*.*"):  # the taken workers went idle again at the stop
                with contextlib.suppress(ValueError, ProcessLookupError):
                    os.kill(int(registration.stem), signal.SIGKILL)
    return Run("tidemark", records, clocks, problems_of(values, expected))


def run_quix(bootstrap: str, home: Path, python: Path, input_topic: str, records: int,
             expected: dict[str, int], options: argparse.Namespace, label: str, keyed: bool = False) -> Run:
    run_id = uuid.uuid4().hex[:6]
    output = f"vsq-quix-out-{run_id}"
    log_path = home / f"quix-{run_id}.log"
    command = [str(python), str(QUIX_APP), "--bootstrap", bootstrap, "--input", input_topic, "--output", output,
               "--group", f"vsq-quix-{run_id}", "--state-dir", str(home / f"quix-state-{run_id}"),
               "--partitions", str(PARTITIONS), "--commit-interval-s", str(options.commit_interval_ms / 1000),
               *(["--keyed"] if keyed else [])]
    with open(log_path, "wb") as log:
        launched = time.monotonic()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent)
    print(f"  [{label}] launched {QUIX_APP.name} (Quix Streams, one process)", flush=True)
    try:
        clocks, values = watch_output(bootstrap, output, records, launched, lambda: process.poll() is None,
                                      label, options.timeout_s)
    except BenchError as error:
        tail = " | ".join(log_path.read_text(errors="replace").splitlines()[-3:])
        raise BenchError(f"{error}; log {log_path}: {tail}") from None
    finally:
        stop_process(process, timeout_s=60)
    return Run("quix", records, clocks, problems_of(values, expected))


# --- the table -----------------------------------------------------------------------------------

def _rate(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:,.0f}"


def _seconds(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}" if values else "n/a"


def table(runs: list[Run], by_inputs: bool = True) -> list[str]:
    """Per input kind (``by_inputs``; else the one input, without that column), system and clock:
    min / median / max records/s (the steady clock leaves out runs whose first commit held every
    result: ``n/a`` when all do) and the first result's time after the launch; then the ratios of
    the medians per input kind."""
    kinds = [kind for kind in INPUTS if any(r.inputs == kind for r in runs)]

    def column(kind: str) -> str:
        return f"{kind:<8} " if by_inputs else ""

    lines = [f"{column('inputs')}{'system':<9} {'clock':<22} {'runs':>4} {'min rec/s':>10} {'median':>10} "
             f"{'max':>10}  first result s (min / median / max)"]
    medians: dict[tuple[str, str, str], float] = {}
    for kind in kinds:
        for system in SYSTEMS:
            done = [r for r in runs if r.inputs == kind and r.system == system]
            for clock, rate in (("launch -> last result", lambda r: r.end_to_end),
                                ("first -> last result", lambda r: r.steady)):
                values = [v for v in map(rate, done) if not math.isnan(v)]
                medians[kind, system, clock] = statistics.median(values) if values else float("nan")
                low, high = (min(values), max(values)) if values else (float("nan"),) * 2
                first = _seconds([r.clocks.first_s for r in done]) if clock.startswith("launch") else ""
                lines.append(f"{column(kind)}{system:<9} {clock:<22} {len(values):>4} {_rate(low):>10} "
                             f"{_rate(medians[kind, system, clock]):>10} {_rate(high):>10}  {first}".rstrip())
    for kind in kinds:
        for clock in ("launch -> last result", "first -> last result"):
            ratio = medians[kind, "tidemark", clock] / medians[kind, "quix", clock]
            lines.append(f"ratio Tidemark/Quix of the medians, {kind + ' input, ' if by_inputs else ''}{clock}: "
                         f"{'n/a' if math.isnan(ratio) else f'{ratio:.2f}'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, nargs="+", default=[300_000],
                        help="input sizes, each run in its own rounds and table (e.g. 300000 1500000)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="Tidemark worker processes for the stage")
    parser.add_argument("--parallelism", type=int, default=PARTITIONS, help="Tidemark's tasks (key-group ranges)")
    parser.add_argument("--commit-interval-ms", type=int, default=2000,
                        help="Tidemark's checkpoint interval and Quix's commit interval")
    parser.add_argument("--timeout-s", type=float, default=1800, help="per run, from the launch")
    parser.add_argument("--warm-workers", action="store_true",
                        help="start Tidemark's worker processes before each launch (tidemark jobs warm-workers)")
    parser.add_argument("--inputs", nargs="+", choices=INPUTS, default=list(INPUTS),
                        help="the input topics: unkeyed (round-robin, Quix re-keys) and/or keyed by URL")
    options = parser.parse_args()
    for name in ("records", "rounds", "workers", "parallelism", "commit_interval_ms"):
        if min(getattr(options, name) if name == "records" else [getattr(options, name)]) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if options.workers > options.parallelism:
        parser.error("--workers must not exceed --parallelism (each worker owns at least one task)")
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-vs-quix-"))
    try:
        python = quix_python()
        runs: list[Run] = []
        with kafka_or_embedded(home / "broker") as (bootstrap, broker):
            print(f"broker: {'external ' + bootstrap if broker is None else 'embedded ' + broker.describe()}",
                  flush=True)
            for size, index, kind, system in ((n, i, k, s) for n in options.records for i in range(options.rounds)
                                              for k in options.inputs for s in SYSTEMS):
                if (index, kind, system) == (0, options.inputs[0], SYSTEMS[0]):
                    data = list(generate(size))
                    expected = expected_url_counts(data)
                if system == SYSTEMS[0]:  # a fresh input topic per round and input kind
                    input_topic = f"vsq-in-{kind}-{uuid.uuid4().hex[:6]}"
                    print(f"{size:,} records, round {index + 1}/{options.rounds}: writing them to {input_topic} "
                          f"({PARTITIONS} partitions, {kind})", flush=True)
                    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(input_topic, PARTITIONS)])
                    produce(bootstrap, input_topic, data, PARTITIONS, chunk=10_000,
                            key_of=url_key if kind == "keyed" else None)
                label = f"{system} {kind} {size:,} r{index + 1}"
                if system == "tidemark":
                    run = run_tidemark(bootstrap, home, input_topic, size, expected, options, label)
                else:
                    run = run_quix(bootstrap, home, python, input_topic, size, expected, options,
                                   label, keyed=kind == "keyed")
                run.inputs = kind
                runs.append(run)
                verdict = "output verified" if not run.problems else "OUTPUT MISMATCH"
                print(f"  [{label}] {run.end_to_end:,.0f} rec/s from launch (last result at "
                      f"{run.clocks.last_s:.1f} s), {_rate(run.steady)} rec/s first -> last (first result at "
                      f"{run.clocks.first_s:.1f} s, {run.clocks.at_first} in the first commit); {verdict}",
                      flush=True)
                for problem in run.problems[:10]:
                    print(f"  [{label}] MISMATCH: {problem}", flush=True)
    except BenchError as error:
        print(f"bench_vs_quix: {error} (working directory kept: {home})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bench_vs_quix: interrupted (working directory kept: {home})", file=sys.stderr)
        return 130
    shutil.rmtree(home, ignore_errors=True)
    for size in options.records:
        print(f"\ncount per URL, {size:,} records on {PARTITIONS} partitions, exactly-once, RocksDB state, "
              f"commit interval {options.commit_interval_ms} ms, {options.rounds} interleaved round(s); Tidemark "
              f"parallelism {options.parallelism}, workers {options.workers}"
              f"{' (pre-started: jobs warm-workers, not timed)' if options.warm_workers else ''}; Quix Streams "
              f"{quix_version()}")
        for line in table([r for r in runs if r.records == size]):
            print(line)
    per_size = options.rounds * len(SYSTEMS) * len(options.inputs)
    mismatched = [f"{r.system} {r.inputs} {r.records:,} records round "
                  f"{i % per_size // (len(SYSTEMS) * len(options.inputs)) + 1}" for i, r in enumerate(runs) if r.problems]
    if mismatched:
        print(f"\nOUTPUT MISMATCH in {', '.join(mismatched)}: the figures above are not comparable", file=sys.stderr)
        return 1
    print("every output verified: the last hits per URL equal the input's counts (and each URL's hits run 1..n)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
