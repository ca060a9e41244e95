"""Timer benchmark (issue #15): timers registered and fired per second, on heap and RocksDB.

Run: ``.venv/bin/python bench/bench_timers.py`` (about a minute on 2 cores); ``--quick`` for a
smoke run. Rounds alternate the backends (heap, RocksDB, heap, ...), each round a fresh backend;
prints one table, min / median / max over the rounds:

* register: ``set_current_key`` + ``register`` of one event-time timer, for N timers over N/4
  distinct keys (4 timers per key, as 4 open one-minute windows would);
* fire: ``pop_due`` of all N timers, each with its key made current and removed from the queue;
* restore: ``restore`` of the backend's own checkpoint holding the N timers (full canonical on
  heap, incremental on RocksDB), a new ``InternalTimerService`` and its ``next_timestamp``;
* in memory: how many timers the restored queue holds in memory (heap: all of them; RocksDB:
  the cache of each key group's first timers).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tidemark.state import HashMapStateBackend, KeyGroupRange, RocksDBStateBackend
from tidemark.state.rocksdb.timers import RocksDBTimerQueue
from tidemark.state.timers import InternalTimerService, TimeDomain
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId

MAX_P = 128
FULL = KeyGroupRange(0, MAX_P - 1)
EVENT = TimeDomain.EVENT_TIME
KINDS = ("heap", "rocksdb")


def new_backend(kind: str, work: Path, round_: int):
    if kind == "heap":
        return HashMapStateBackend(FULL, MAX_P)
    return RocksDBStateBackend(work / f"rocks-{round_}-{time.monotonic_ns()}", FULL, MAX_P)


def one_round(kind: str, timers: int, work: Path, round_: int) -> tuple[float, float, float, int]:
    """(registered/s, fired/s, seconds to restore and find the first timer, timers in memory)."""
    keys = [f"url-{i}" for i in range(timers // 4)]
    backend = new_backend(kind, work, round_)
    service = InternalTimerService(backend)
    set_key, register = backend.set_current_key, service.register
    started = time.perf_counter()
    for i in range(timers):
        set_key(keys[i % len(keys)])
        register(EVENT, 60_000 * (i // len(keys) + 1))
    registered = timers / (time.perf_counter() - started)

    storage = FilesystemCheckpointStorage(work / f"checkpoints-{kind}-{round_}")
    snapshot = backend.snapshot(CheckpointId(1), storage)
    restored = new_backend(kind, work, round_ + 1000)
    started = time.perf_counter()
    restored.restore([snapshot], storage)
    restored_service = InternalTimerService(restored)
    assert restored_service.next_timestamp(EVENT) == 60_000
    restore_s = time.perf_counter() - started
    queue = restored.timer_queue(EVENT.value)
    in_memory = queue.cached_timers if isinstance(queue, RocksDBTimerQueue) else len(queue)
    assert restored_service.count(EVENT) == timers
    restored.close()

    started = time.perf_counter()
    fired = sum(1 for _ in service.pop_due(EVENT, 10**12))
    fired_rate = fired / (time.perf_counter() - started)
    assert fired == timers, (fired, timers)
    backend.close()
    return registered, fired_rate, restore_s, in_memory


def spread(values: list[float], fmt: str) -> str:
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (a smoke run)")
    parser.add_argument("--timers", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    timers, rounds = (8_000, 1) if args.quick else (args.timers, args.rounds)
    results: dict[str, list[tuple[float, float, float, int]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="bench-timers-") as tmp:
        for round_ in range(rounds):
            for kind in KINDS:
                print(f"  {kind}: round {round_ + 1} of {rounds} ({timers:,} timers)", flush=True)
                results[kind].append(one_round(kind, timers, Path(tmp), round_))
    rows = []
    for kind in KINDS:
        registered, fired, restore, in_memory = (list(column) for column in zip(*results[kind]))
        rows.append((kind, spread(registered, ",.0f"), spread(fired, ",.0f"), spread(restore, ".2f"),
                     f"{max(in_memory):,}"))
    header = ("backend", "registered/s", "fired/s", "restore + first timer (s)", "timers in memory after restore")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(f"\nTimers, {timers:,} over {timers // 4:,} keys; min / median / max of {rounds} round(s)\n")
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
