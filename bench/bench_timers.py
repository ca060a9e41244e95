"""Timer benchmark (issue #15): timers registered and fired per second, on heap and RocksDB.

Run: ``.venv/bin/python bench/bench_timers.py`` (about a minute on 2 cores); ``--quick`` for a
smoke run. Prints one table, min / median / max over the rounds (each round a fresh backend):

* register: ``set_current_key`` + ``register`` of one event-time timer, for N timers over N/4
  distinct keys (4 timers per key, as 4 open one-minute windows would);
* fire: ``pop_due`` of all N timers, each with its key made current and removed from the state;
* rebuild: a new ``TimerService`` over a backend restored from a checkpoint holding the N timers
  (the index is built from the timer states).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tidemark.state import HashMapStateBackend, KeyGroupRange, RocksDBStateBackend
from tidemark.state.timers import TimeDomain, TimerService
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId

MAX_P = 128
FULL = KeyGroupRange(0, MAX_P - 1)
EVENT = TimeDomain.EVENT_TIME


def new_backend(kind: str, work: Path, round_: int):
    if kind == "heap":
        return HashMapStateBackend(FULL, MAX_P)
    return RocksDBStateBackend(work / f"rocks-{round_}-{time.monotonic_ns()}", FULL, MAX_P)


def one_round(kind: str, timers: int, work: Path, round_: int) -> tuple[float, float, float]:
    """(registered/s, fired/s, seconds to rebuild the index after a restore)."""
    keys = [f"url-{i}" for i in range(timers // 4)]
    backend = new_backend(kind, work, round_)
    service = TimerService(backend)
    set_key, register = backend.set_current_key, service.register
    started = time.perf_counter()
    for i in range(timers):
        set_key(keys[i % len(keys)])
        register(EVENT, 60_000 * (i // len(keys) + 1))
    registered = timers / (time.perf_counter() - started)

    storage = FilesystemCheckpointStorage(work / f"checkpoints-{kind}-{round_}")
    snapshot = backend.snapshot(CheckpointId(1), storage)
    restored = new_backend(kind, work, round_ + 1000)
    restored.restore([snapshot], storage)
    started = time.perf_counter()
    TimerService(restored)
    rebuild_s = time.perf_counter() - started
    restored.close()

    started = time.perf_counter()
    fired = sum(1 for _ in service.pop_due(EVENT, 10**12))
    fired_rate = fired / (time.perf_counter() - started)
    assert fired == timers, (fired, timers)
    backend.close()
    return registered, fired_rate, rebuild_s


def spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (a smoke run)")
    parser.add_argument("--timers", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    timers, rounds = (8_000, 1) if args.quick else (args.timers, args.rounds)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-timers-") as tmp:
        for kind in ("heap", "rocksdb"):
            results = []
            for round_ in range(rounds):
                print(f"  {kind}: round {round_ + 1} of {rounds} ({timers:,} timers)", flush=True)
                results.append(one_round(kind, timers, Path(tmp), round_))
            registered, fired, rebuild = (list(column) for column in zip(*results))
            rows.append((kind, spread(registered, ",.0f"), spread(fired, ",.0f"), spread(rebuild, ".2f")))
    header = ("backend", "registered/s", "fired/s", f"index rebuild of {timers:,} timers (s)")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\nTimers, {timers:,} over {timers // 4:,} keys; min / median / max of {rounds} round(s)\n")
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
