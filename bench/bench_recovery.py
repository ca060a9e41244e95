"""Recovery of the demo job: from a stage worker's SIGKILL to every stage processing records again.

Runs the two-stage demo job (``top_urls``: ``minute_counts`` -> channel -> ``top_urls``) on the
local pipeline with input arriving all the time, waits until it has completed checkpoints (and,
with standbys, until each stage's warm standby is waiting), SIGKILLs one stage's worker and reads
the timeline of the recovery from the supervisor's and the stages' logs:

    detected     the supervisor saw the worker die
    restore      the coordinator issued the restore (the new epoch)
    running      every stage restored its state and started its query
    processing   every stage processed records of the new attempt (the recovery's end)
    checkpoint   the first checkpoint of the new attempt completed

Each round is done with warm standby workers (the default) and without (``--no-standby``: a new
process for the killed worker), interleaved, on the same broker; either way the other stage's
worker ends its attempt and restores in place (``tidemark.runtime.worker.process``). The table
gives min / median / max per part and the ratio of the medians.

    .venv/bin/python bench/bench_recovery.py --rounds 3
    .venv/bin/python bench/bench_recovery.py --rounds 3 --standby-only --workers 2   # the demo's layout
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.local.pipeline import InputFeeder, JobRun, LocalPipeline, json_events, wait_for

JOB = "tidemark.examples.access_log:top_urls"
STAGES = ("minute_counts", "top_urls")
PARTS = ("detected", "restore", *(f"running {s}" for s in STAGES), "running",
         *(f"processing {s}" for s in STAGES), "processing", "checkpoint")


def _at(event: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


def _all_events(home: Path, stage: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for pattern in (f"*/{stage}.log", f"*/{stage}.w*.log", f"*/{stage}.standby.log"):  # a standby keeps its own log
        for log in (home / "runs").glob(pattern):
            # a fused worker's log holds its exchange reader lane's events too
            events += [e for e in json_events(log.read_text(errors="replace")) if e.get("stage", stage) == stage]
    return events


def _stage_events(home: Path, stage: str, name: str, epoch: int | None = None) -> list[dict[str, Any]]:
    return [e for e in _all_events(home, stage) if e.get("event") == name and e.get("epoch") == epoch]


def _first(job: JobRun, name: str, **match: Any) -> float | None:
    for event in job.events(name):
        if all(event.get(k) == v for k, v in match.items()):
            return _at(event)
    return None


def one_round(bootstrap: str, root: Path, standby: bool, kill_stage: str, interval_ms: int,
              workers: int = 1, fused: bool | None = None) -> dict[str, float]:
    run = uuid.uuid4().hex[:6]
    name = "standby" if standby else "cold"
    home = root / f"{name}-{run}"
    args = {"job_id": f"rec-{run}", "input_topic": f"rec-in-{run}", "channel_topic": f"rec-ch-{run}",
            "output_topic": f"rec-out-{run}", "workers": workers}
    with LocalPipeline(home, bootstrap, topic_prefix=f"rec-{run}",
                       env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": str(interval_ms)}) as pipe:
        pipe.create_topic(args["input_topic"], 4)
        done = False
        feeder = InputFeeder(bootstrap, args["input_topic"], total=0, chunk=50, pause_s=0.2,
                             until=lambda: done).start()
        job = pipe.start_job(JOB, args, standby=standby, fused=fused)
        wait_for(lambda: pipe.completed_checkpoints(args["job_id"]) >= 2, 300, "two checkpoints")
        if standby:
            wait_for(lambda: all(_stage_events(home, s, "standby warm; waiting for an attempt") for s in STAGES),
                     300, "warm standbys")
        last = "" if workers == 1 else f".w{workers - 1}"  # the stage's last worker (the demo kills it)
        pids = {stage: int(json.loads(next((home / "runs").glob(f"*/{stage}{last}.epoch-1.ready")).read_text())["pid"])
                for stage in STAGES}
        memory = {stage: memory_mib(pid) for stage, pid in pids.items()}
        if standby:
            memory["standby"] = max((memory_mib(int(e["pid"])) for s in STAGES
                                     for e in _stage_events(home, s, "standby warm; waiting for an attempt")))
        rss = {f"{kind} {name}": value[i] for name, value in memory.items()
               for i, kind in enumerate(("pss", "peak"))}
        pid = pids[kill_stage]
        completed = pipe.completed_checkpoints(args["job_id"])
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: all(_stage_events(home, s, "first records processed", 2) for s in STAGES), 300,
                 "processing again")
        wait_for(lambda: pipe.completed_checkpoints(args["job_id"]) > completed, 300, "a checkpoint after the restore")
        checkpoint = time.time()
        done = True
        feeder.join(60)
        times = {
            "detected": _first(job, "worker failed"),
            "restore": _first(job, "restore issued", epoch=2),
            **{f"running {s}": _at(_stage_events(home, s, "stage running", 2)[0]) for s in STAGES},
            **{f"processing {s}": _at(_stage_events(home, s, "first records processed", 2)[0]) for s in STAGES},
            "checkpoint": checkpoint,
        }
        times["running"] = max(times[f"running {s}"] for s in STAGES)
        times["processing"] = max(times[f"processing {s}"] for s in STAGES)
        job.stop()
    return {**{part: (at - killed) if at is not None else float("nan") for part, at in times.items()}, **rss}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the stage's JVM, Spark's Python workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def _kib(path: str, field: str) -> int:
    try:
        text = Path(path).read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith(field)), 0)


def memory_mib(pid: int) -> tuple[float, float]:
    """A process tree's memory, MiB: (proportional set size now, summed over the tree, so pages
    Spark's forked Python workers share count once; the largest peak RSS of one process in it)."""
    members = _tree(pid)
    pss = sum(_kib(f"/proc/{m}/smaps_rollup", "Pss:") for m in members)
    peak = max(_kib(f"/proc/{m}/status", "VmHWM:") for m in members)
    return pss / 1024, peak / 1024


def _row(values: list[float]) -> str:
    return f"{min(values):6.1f} {statistics.median(values):6.1f} {max(values):6.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kill-stage", choices=STAGES, default="top_urls")
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--standby-only", action="store_true", help="skip the rounds without standbys")
    parser.add_argument("--work-dir", type=Path, help="keep the runs' files here (default: a temporary folder)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per stage (the demo runs 2: its "
                        "first stage's exchange readers in them); the last worker of --kill-stage is killed")
    parser.add_argument("--readers-apart", action="store_true", help="the exchange readers as processes of their "
                        "own (jobs run --no-fused-workers), not in the stage's workers")
    options = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    modes = (True,) if options.standby_only else (True, False)
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-recovery-") as tmp, \
            kafka_or_embedded(Path(tmp) / "broker") as (bootstrap, _):
        root = options.work_dir or Path(tmp)
        for index in range(options.rounds):
            for standby in modes:
                label = "warm standby" if standby else "new processes"
                print(f"round {index + 1}/{options.rounds}, {label}: killing {options.kill_stage} ...", flush=True)
                timeline = one_round(bootstrap, root, standby, options.kill_stage, options.interval_ms,
                                     options.workers, False if options.readers_apart else None)
                results[standby].append(timeline)
                print("   " + ", ".join(f"{p} {timeline[p]:.1f}s" for p in PARTS), flush=True)
    print(f"\nRecovery of the demo job ({options.workers} worker(s) per stage) after a SIGKILL of "
          f"{options.kill_stage} (seconds after the kill; {options.rounds} rounds each, min / median / max)\n")
    print(f"{'part':<26} {'warm standby':>20}   {'new processes':>20}   {'ratio of medians':>16}")
    for part in PARTS:
        warm = [r[part] for r in results[True]]
        cold = [r[part] for r in results[False]]
        if not cold:
            print(f"{part:<26} {_row(warm):>20}")
            continue
        ratio = statistics.median(cold) / statistics.median(warm)
        print(f"{part:<26} {_row(warm):>20}   {_row(cold):>20}   {ratio:>15.1f}x")
    print("\nMemory before the kill, MiB: pss = a stage's process tree (Python, its JVM, Spark's Python "
          "workers; shared pages counted once), peak = the largest peak RSS of one process in it")
    for part in [f"{kind} {name}" for name in (*STAGES, "standby") for kind in ("pss", "peak")]:
        values = [r[part] for r in results[True] + results[False] if part in r]
        print(f"{part:<26} {_row(values):>20}")


if __name__ == "__main__":
    main()
