"""Windows: Tidemark's tumbling window against Quix Streams' on the same count, broker, input topic
and machine, and Tidemark's session windows over the same input.

Each round writes ``--records`` access-log records (``tidemark.examples.generator``, 1000 per
minute of event time, 4 partitions, no key) to a fresh input topic, then runs on it, one after the
other:

* Tidemark tumbling: ``bench/tidemark_windowed_counts.py`` (``tumbling_url_counts``: keyed by URL,
  ``Windowed(TumblingWindows(60_000), aggregate=Count(), process=UrlWindowRow)``, event time the
  record's ``ts`` with 1000 ms of out-of-orderness and a 3000 ms idle timeout; exactly-once,
  RocksDB state, ``--parallelism`` tasks in ``--workers`` worker processes, no warm standby) on the
  local pipeline, ``bench/`` on the job's ``PYTHONPATH``; the coordinator and checkpoint-store run
  only during Tidemark's turns;
* Quix Streams tumbling (``bench/quix_tumbling_count_per_url.py``: ``group_by("url")``,
  ``tumbling_window(60_000, grace_ms=--quix-grace-ms).count().final()`` with the record's ``ts`` as
  its timestamp, RocksDB state, ``processing_guarantee="exactly-once"``), run with the Python of the
  benchmark-only environment ``.venv-bench-quix/`` that ``bench_vs_quix.py`` manages;
* Tidemark sessions (``tidemark.examples.access_log_windows:sessions``: per client IP, a session
  gap of ``--session-gap-ms``, the generator's 1000 IPs; RocksDB, exactly-once), which Quix has no
  peer for: its records/s, and the full size of its state at the end (the first checkpoint that
  completes after the last session is committed, ``full_size_bytes`` of the coordinator's API).

Both tumbling jobs write ``{"url", "start", "end", "hits"}`` once per window, when it closes, and
commit every ``--commit-interval-ms``. They close windows by different rules, so each output is
verified against exactly the windows its system's rule closes on this input (computed from the
input records, without either system's window code): every one of them once, with the input's
count, and nothing else (both numbers of windows are printed).

* Tidemark closes a window when its watermark passes the window's end; the watermark is the
  slowest partition's newest event time minus the out-of-orderness, and reaches the input's newest
  minus the out-of-orderness once the partitions go idle: every window but the last one closes
  (that last step waits for the idle timeout, which Tidemark's clock includes).
* Quix keeps no time per partition: a URL's window closes when a record *of that URL* reaches its
  end plus the grace, and a record whose window closed is dropped as late. It reads the 4 input
  partitions in fetch-sized runs, one partition after another (the consumer's default fetch is up
  to 1 MB per partition: about 8,000 of these records, 32 minutes of a partition's event time), so
  a URL's records go back in time by tens of minutes: with a grace of 1000 ms it dropped 147,506
  of 200,000 records as late (the latest by 34 minutes). The
  grace is therefore ``--quix-grace-ms``, default two hours (one hour still dropped 4,076 of
  1,500,000 records, the latest 71 minutes behind its URL's time); the app counts
  late records and a run that dropped any fails its verification, naming the grace that would keep
  them. A longer grace only keeps windows open longer: Quix's cost per record does not depend on
  it (it expires a key's windows with one range read from the last one it expired), and the
  windows of each URL's last hour never close (not expected of it).

Clocks, as ``bench_vs_quix.py``: one read_committed consumer watches the output topic from the
process launch: input records/s from the launch to the last result committed (start-up
included), and the steady state: the input records the results committed after the first commit
stand for (their share of all results, windows being spread evenly over the input's event time)
over the time from the first result committed to the last. Every output is verified; a mismatch
is printed loudly and the script exits 1 after the tables. Rounds interleave the systems (Tidemark
tumbling, Quix tumbling, Tidemark sessions, ...); the tables give min / median / max and the ratio
Tidemark/Quix of the tumbling medians.

    .venv/bin/python bench/bench_windows.py --records 1500000 --rounds 3

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from tidemark.admin.client import ApiError
from tidemark.broker.embedded import kafka_or_embedded
from tidemark.examples.access_log import IDLE_TIMEOUT_MS, MINUTE_MS, OUT_OF_ORDERNESS_MS
from tidemark.examples.generator import generate, produce
from tidemark.examples.verify import sessions_expectation, verify_example
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicSpec
from tidemark.local.pipeline import LocalPipeline
from tidemark.processes import die_with_parent, stop_process
from tidemark.verification.comparison import compare

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # bench/ is not a package: its shared helpers are imported by file name

from bench_vs_quix import (  # noqa: E402
    PARTITIONS,
    SYSTEMS,
    BenchError,
    Run,
    _rate,
    quix_python,
    quix_version,
    table,
    watch_output,
)

QUIX_APP = BENCH / "quix_tumbling_count_per_url.py"
TUMBLING_JOB = "tidemark_windowed_counts:tumbling_url_counts"
SESSIONS_JOB = "tidemark.examples.access_log_windows:sessions"
WINDOW_MS = MINUTE_MS
SESSIONS = "sessions"
ALL_SYSTEMS = (*SYSTEMS, SESSIONS)  # tidemark (tumbling), quix (tumbling), sessions (Tidemark's)
QUIX_GRACE_MS = 120 * MINUTE_MS  # what Quix needs for none of these records to be late (see the module)
LATE_LINE = re.compile(r"^quix: late records dropped (\d+) \(the latest by (\d+) ms\)$", re.MULTILINE)


# --- what each system must output ------------------------------------------------------------------

@dataclass
class WindowCounts:
    """The input's hits per (URL, window start), each URL's newest event time and the newest overall."""

    window_ms: int
    hits: Counter[tuple[str, int]] = field(default_factory=Counter)
    newest_per_url: dict[str, int] = field(default_factory=dict)
    newest: int | None = None

    @classmethod
    def of(cls, records: Iterable[bytes], window_ms: int = WINDOW_MS) -> WindowCounts:
        """Counted from the JSON records (malformed ones skipped, as the jobs' dead-letter policy does)."""
        counts = cls(window_ms)
        hits, newest_per_url = counts.hits, counts.newest_per_url
        newest = None
        for raw in records:
            try:
                record = json.loads(raw)
                ts, url = int(record["ts"]), record["url"]
            except (ValueError, KeyError, TypeError):
                continue
            hits[(url, ts - ts % window_ms)] += 1
            if ts > newest_per_url.get(url, ts - 1):
                newest_per_url[url] = ts
            newest = ts if newest is None or ts > newest else newest
        counts.newest = newest
        return counts

    def rows(self, closed: Iterable[tuple[str, int]]) -> dict[Hashable, dict[str, Any]]:
        """The expected output row of each window in ``closed``, by its identity ``(url, start)``."""
        return {(url, start): {"url": url, "start": start, "end": start + self.window_ms,
                               "hits": self.hits[(url, start)]} for url, start in closed}

    def closed_by_watermark(self, max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS) -> dict[Hashable, Any]:
        """Tidemark: the windows whose last millisecond its final watermark reaches (the newest
        event time minus the out-of-orderness, minus one, once every partition went idle)."""
        if self.newest is None:
            return {}
        watermark = self.newest - max_out_of_orderness_ms - 1
        return self.rows(w for w in self.hits if w[1] + self.window_ms - 1 <= watermark)

    def closed_per_key(self, grace_ms: int) -> dict[Hashable, Any]:
        """Quix (closing strategy ``"key"``): a URL's windows ending at or before its newest
        record's timestamp minus the grace."""
        newest = self.newest_per_url
        return self.rows(w for w in self.hits if w[1] + self.window_ms <= newest[w[0]] - grace_ms)


def window_problems(values: list[dict[str, Any]], expected: dict[Hashable, Any]) -> list[str]:
    """What is wrong with a tumbling output: each expected (URL, window start) once, with its
    count, and nothing else."""
    verdict = compare((((v.get("url"), v.get("start")), v) for v in values), expected)
    return [] if verdict.exactly_once else [verdict.summary(), *verdict.details]


def session_problems(values: list[dict[str, Any]], expected: dict[Hashable, Any]) -> list[str]:
    verdict = verify_example("sessions", values, expected)
    return [] if verdict.exactly_once else [verdict.summary(), *verdict.details]


# --- runs ------------------------------------------------------------------------------------------

@dataclass
class WindowRun(Run):
    """One run; ``records`` are the input records, ``results`` the windows (sessions) expected."""

    results: int = 0
    state_bytes: int | None = None  # Tidemark: the state's full size at the end

    @property
    def steady(self) -> float:
        """Input records/s of the steady state: the input the results after the first commit
        stand for (their share of all results) over the time from the first result to the last;
        NaN when the first commit held them all."""
        after_first = self.results - self.clocks.at_first
        span = self.clocks.last_s - self.clocks.first_s
        if after_first <= 0 or span <= 0 or self.results <= 0:
            return float("nan")
        return self.records * after_first / self.results / span


def _pythonpath(*first: Path) -> str:
    return os.pathsep.join([*map(str, first), *filter(None, [os.environ.get("PYTHONPATH")])])


def final_state_bytes(pipe: LocalPipeline, job_id: str, label: str, timeout_s: float) -> int | None:
    """The full state size of the first checkpoint of ``job_id`` completed from now on (the state
    once every result is out); None when none completes within ``timeout_s``."""
    def completed() -> tuple[int, dict[str, Any] | None]:
        try:
            jobs = pipe.client().jobs()["jobs"]
        except ApiError:
            return -1, None
        mine = [j for j in jobs if j["job"] == job_id]
        return (mine[0]["counts"]["completed"], mine[0]["last_completed"]) if mine else (-1, None)

    before, _ = completed()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        count, last = completed()
        if before >= 0 and count > before and last is not None:
            return int(last["full_size_bytes"] or 0)
        before = count if before < 0 else before
        time.sleep(0.3)
    print(f"  [{label}] no checkpoint completed within {timeout_s:g} s after the last result: no state size",
          flush=True)
    return None


def run_tidemark(bootstrap: str, home: Path, system: str, reference: str, job_args: dict[str, Any],
                 records: int, expected: dict[Hashable, Any], options: argparse.Namespace, label: str) -> WindowRun:
    """``job_args``: the job's own (its input topic, ...) on top of the benchmark's."""
    run_id = uuid.uuid4().hex[:6]
    output = f"bw-{system}-out-{run_id}"
    job_id = f"bw-{run_id}"
    args = {"job_id": job_id, "output_topic": output,
            "parallelism": options.parallelism, "workers": options.workers, "state_backend": "rocksdb",
            "mode": "EXACTLY_ONCE", **job_args}
    print(f"  [{label}] starting the coordinator and checkpoint-store (not timed)", flush=True)
    with LocalPipeline(home / f"{system}-{run_id}", bootstrap, topic_prefix=f"bw-{run_id}", standby=False,
                       env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(options.commit_interval_ms)}) as pipe:
        launched = time.monotonic()
        job = pipe.start_job(reference, args, env={"PYTHONPATH": _pythonpath(BENCH)})
        print(f"  [{label}] launched `tidemark jobs run {reference}` (parallelism {options.parallelism}, "
              f"workers {options.workers})", flush=True)
        try:
            clocks, values = watch_output(bootstrap, output, len(expected), launched,
                                          lambda: job.process.poll() is None, label, options.timeout_s,
                                          stall_s=options.stall_s)
            state_bytes = final_state_bytes(pipe, job_id, label, timeout_s=max(30.0, options.commit_interval_ms / 100))
        except BenchError as error:
            raise BenchError(f"{error}; log: {job.log_path}") from None
        job.stop()
    check = session_problems if system == SESSIONS else window_problems
    return WindowRun(system, records, clocks, check(values, expected), results=len(expected),
                     state_bytes=state_bytes)


def run_quix(bootstrap: str, home: Path, python: Path, input_topic: str, records: int,
             expected: dict[Hashable, Any], options: argparse.Namespace, label: str) -> WindowRun:
    run_id = uuid.uuid4().hex[:6]
    output = f"bw-quix-out-{run_id}"
    log_path = home / f"quix-{run_id}.log"
    command = [str(python), str(QUIX_APP), "--bootstrap", bootstrap, "--input", input_topic, "--output", output,
               "--group", f"bw-quix-{run_id}", "--state-dir", str(home / f"quix-state-{run_id}"),
               "--partitions", str(PARTITIONS), "--commit-interval-s", str(options.commit_interval_ms / 1000),
               "--window-ms", str(WINDOW_MS), "--grace-ms", str(options.quix_grace_ms)]
    with open(log_path, "wb") as log:
        launched = time.monotonic()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=die_with_parent)
    print(f"  [{label}] launched {QUIX_APP.name} (Quix Streams, one process, grace {options.quix_grace_ms} ms)",
          flush=True)
    try:
        clocks, values = watch_output(bootstrap, output, len(expected), launched, lambda: process.poll() is None,
                                      label, options.timeout_s, stall_s=options.stall_s)
    except BenchError as error:
        tail = " | ".join(log_path.read_text(errors="replace").splitlines()[-3:])
        raise BenchError(f"{error}; log {log_path}: {tail}") from None
    finally:
        stop_process(process, timeout_s=60)
    problems = window_problems(values, expected)
    late, most_ms = late_records(log_path.read_text(errors="replace"))
    if late:
        problems.insert(0, f"Quix dropped {late} records as late, the latest by {most_ms} ms (grace "
                           f"{options.quix_grace_ms} ms): its URLs' time ran ahead on another partition; "
                           f"--quix-grace-ms {options.quix_grace_ms + most_ms} or more keeps them")
    return WindowRun("quix", records, clocks, problems, results=len(expected))


def late_records(log_text: str) -> tuple[int, int]:
    """The late records the Quix app counted and how late the latest one was, in ms (its last
    line; 0 and 0 when it did not say)."""
    found = LATE_LINE.findall(log_text)
    return (int(found[-1][0]), int(found[-1][1])) if found else (0, 0)


# --- the tables ------------------------------------------------------------------------------------

def _bytes(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value / 1e6:,.1f} MB"


def sessions_table(runs: list[WindowRun]) -> list[str]:
    """Min / median / max of Tidemark's sessions: records/s per clock and the state's size at the end."""
    lines = [f"{'system':<9} {'clock':<22} {'runs':>4} {'min':>10} {'median':>10} {'max':>10}"]
    for clock, measure, show in (("launch -> last result", lambda r: r.end_to_end, _rate),
                                 ("first -> last result", lambda r: r.steady, _rate),
                                 ("state at the end", lambda r: float("nan") if r.state_bytes is None
                                  else float(r.state_bytes), _bytes)):
        values = [v for v in map(measure, runs) if not math.isnan(v)]
        low, mid, high = ((min(values), statistics.median(values), max(values)) if values
                          else (float("nan"),) * 3)
        lines.append(f"{'sessions':<9} {clock:<22} {len(values):>4} {show(low):>10} {show(mid):>10} {show(high):>10}")
    return lines


def describe(run: WindowRun) -> str:
    state = "" if run.state_bytes is None else f", state at the end {_bytes(run.state_bytes)}"
    verdict = "output verified" if not run.problems else "OUTPUT MISMATCH"
    return (f"{run.end_to_end:,.0f} rec/s from launch (last result at {run.clocks.last_s:.1f} s), "
            f"{_rate(run.steady)} rec/s first -> last (first result at {run.clocks.first_s:.1f} s, "
            f"{run.clocks.at_first}/{run.results} in the first commit){state}; {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="Tidemark worker processes per stage")
    parser.add_argument("--parallelism", type=int, default=PARTITIONS, help="Tidemark's tasks (key-group ranges)")
    parser.add_argument("--commit-interval-ms", type=int, default=2000,
                        help="Tidemark's checkpoint interval and Quix's commit interval")
    parser.add_argument("--quix-grace-ms", type=int, default=QUIX_GRACE_MS,
                        help="Quix's grace after a window's end (default: %(default)s, see above)")
    parser.add_argument("--session-gap-ms", type=int, default=90_000, help="Tidemark's sessions' gap")
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS),
                        help="what each round runs, in this order (default: %(default)s)")
    parser.add_argument("--timeout-s", type=float, default=1800, help="per run, from the launch")
    parser.add_argument("--stall-s", type=float, default=300,
                        help="a run whose output stops short for this long is verified as it is")
    options = parser.parse_args()
    systems = [name.strip() for name in options.systems.split(",") if name.strip()]
    if not systems or set(systems) - set(ALL_SYSTEMS) or len(set(systems)) != len(systems):
        parser.error(f"--systems takes some of {','.join(ALL_SYSTEMS)}, each once")
    for name in ("records", "rounds", "workers", "parallelism", "commit_interval_ms", "session_gap_ms"):
        if getattr(options, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if options.quix_grace_ms < 0:
        parser.error("--quix-grace-ms must be 0 or more")
    if options.workers > options.parallelism:
        parser.error("--workers must not exceed --parallelism (each worker owns at least one task)")
    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-windows-"))
    runs: list[WindowRun] = []
    try:
        python = quix_python()
        with kafka_or_embedded(home / "broker") as (bootstrap, broker):
            print(f"broker: {'external ' + bootstrap if broker is None else 'embedded ' + broker.describe()}",
                  flush=True)
            data = list(generate(options.records))
            print(f"expected outputs: computing from the {len(data)} input records (not timed)", flush=True)
            counts = WindowCounts.of(data)
            expected = {"tidemark": counts.closed_by_watermark(),
                        "quix": counts.closed_per_key(options.quix_grace_ms)}
            if SESSIONS in systems:
                expected[SESSIONS] = sessions_expectation(data, options.session_gap_ms)
            empty = [s for s in systems if not expected[s]]
            if empty:
                raise BenchError(f"{', '.join(empty)} would close no window on {options.records} records: give "
                                 f"more records (Quix closes a URL's windows a grace after their end)")
            print(f"expected outputs: Tidemark's tumbling window {len(expected['tidemark'])} windows, Quix's "
                  f"{len(expected['quix'])} (of {len(counts.hits)} with records)"
                  + (f", sessions {len(expected[SESSIONS])} (gap {options.session_gap_ms} ms)"
                     if SESSIONS in systems else ""), flush=True)
            for index in range(options.rounds):
                input_topic = f"bw-in-{uuid.uuid4().hex[:6]}"
                print(f"round {index + 1}/{options.rounds}: writing {options.records} records to {input_topic} "
                      f"({PARTITIONS} partitions)", flush=True)
                ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [TopicSpec(input_topic, PARTITIONS)])
                produce(bootstrap, input_topic, data, PARTITIONS, chunk=10_000)
                for system in systems:
                    label = f"{system} r{index + 1}"
                    if system == "quix":
                        run = run_quix(bootstrap, home, python, input_topic, options.records, expected["quix"],
                                       options, label)
                    elif system == "tidemark":
                        run = run_tidemark(bootstrap, home, system, TUMBLING_JOB, {"input_topic": input_topic},
                                           options.records, expected["tidemark"], options, label)
                    else:
                        run = run_tidemark(bootstrap, home, system, SESSIONS_JOB,
                                           {"input_topic": input_topic, "gap_ms": options.session_gap_ms},
                                           options.records, expected[SESSIONS], options, label)
                    runs.append(run)
                    print(f"  [{label}] {describe(run)}", flush=True)
                    for problem in run.problems[:10]:
                        print(f"  [{label}] MISMATCH: {problem}", flush=True)
    except BenchError as error:
        print(f"bench_windows: {error} (working directory kept: {home})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"bench_windows: interrupted (working directory kept: {home})", file=sys.stderr)
        return 130
    shutil.rmtree(home, ignore_errors=True)
    print(f"\ntumbling one-minute count per URL, {options.records} records on {PARTITIONS} partitions, exactly-once, "
          f"RocksDB state, commit interval {options.commit_interval_ms} ms, {options.rounds} interleaved round(s); "
          f"Tidemark parallelism {options.parallelism}, workers {options.workers}, out-of-orderness "
          f"{OUT_OF_ORDERNESS_MS} ms, idle timeout {IDLE_TIMEOUT_MS} ms; Quix Streams {quix_version()}, grace "
          f"{options.quix_grace_ms} ms")
    for line in table([r for r in runs if r.system in SYSTEMS], by_inputs=False):
        print(line)
    if SESSIONS in systems:
        print(f"\nTidemark session windows per IP, gap {options.session_gap_ms} ms, the same input (no peer in Quix)")
        for line in sessions_table([r for r in runs if r.system == SESSIONS]):
            print(line)
    mismatched = [f"{r.system} round {i // len(systems) + 1}" for i, r in enumerate(runs) if r.problems]
    if mismatched:
        print(f"\nOUTPUT MISMATCH in {', '.join(mismatched)}: the figures above are not comparable", file=sys.stderr)
        return 1
    print("every output verified: each window (session) its system closes on this input, once, with the input's "
          "count, and nothing else")
    return 0


if __name__ == "__main__":
    sys.exit(main())
