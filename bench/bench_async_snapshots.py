"""Asynchronous snapshots: how long a checkpoint holds the processing thread, with large state.

Run: ``.venv/bin/python bench/bench_async_snapshots.py`` (about 3 minutes on 2 cores; ``--gb``
sets the RocksDB state size, default 1.0; ``--quick`` shrinks everything for a smoke run).
Prints one table.

* **RocksDB**: one backend filled with ``--gb`` of state (1 KiB incompressible values, compactions
  settled), then ``--checkpoints`` incremental checkpoints, ``--changed`` percent of the keys
  (default 1%) changed in each interval, taken as a worker takes them: the synchronous part
  (``snapshot_async``: the memtables flushed and the live files hard-linked) on the processing
  thread, the asynchronous part (the new SST files uploaded to a filesystem checkpoint storage) on
  another thread while the processing thread makes the next interval's changes. Reported: the
  synchronous part (the time the processing thread is held) min / p50 / p99 / max, the
  asynchronous part, and, for comparison, the same checkpoint taken entirely on the processing
  thread (both parts at once, as before snapshots were asynchronous). Also the longest pause of
  the processing thread between two updates while the asynchronous part runs (the processing
  thread keeps changing keys until it ends): what holds the interpreter lock on the other thread
  holds the processing thread too.
* **Heap**: the same with ``--heap-keys`` keys of int values (the synchronous part is a
  copy-on-write capture; the asynchronous part serializes and writes the canonical file).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tidemark.state import (
    HashMapStateBackend,
    KeyGroupRange,
    RocksDBOptions,
    RocksDBStateBackend,
    ValueStateDescriptor,
)
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.types import CheckpointId

MAX_P = 128
FULL = KeyGroupRange(0, MAX_P - 1)
VALUE_BYTES = 1024


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def fill(backend: Any, keys: int, value: Callable[[int], Any], label: str) -> Any:
    state = backend.get_state(ValueStateDescriptor("v"))
    started, step = time.monotonic(), max(1, keys // 10)
    for key in range(keys):
        backend.set_current_key(key)
        state.update(value(key))
        if key % step == step - 1:
            print(f"  {label}: {key + 1:,} / {keys:,} keys ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    return state


def change(backend: Any, state: Any, keys: int, count: int, value: Callable[[int], Any], rng: random.Random) -> None:
    """``count`` random keys get a new value."""
    for _ in range(count):
        key = rng.randrange(keys)
        backend.set_current_key(key)
        state.update(value(key + rng.randrange(1 << 20)))


def change_paced(backend: Any, state: Any, keys: int, count: int, value: Callable[[int], Any], rng: random.Random,
                 interval_s: float, until: threading.Thread) -> float:
    """``count`` changes spread over ``interval_s`` in steps of 10 ms (a worker's micro-batches),
    going on at that rate while ``until`` is alive; the longest time in ms the processing thread
    was held: a step's changes taking longer than they take alone, or a pause overrunning."""
    step, per_step = 0.010, max(1, round(count * 0.010 / interval_s))
    longest, made, alone = 0.0, 0, float("inf")
    while made < count or until.is_alive():
        began = time.perf_counter()
        change(backend, state, keys, per_step, value, rng)
        made += per_step
        took = time.perf_counter() - began
        alone = min(alone, took)
        paused = time.perf_counter()
        time.sleep(max(0.0, step - took))
        overrun = time.perf_counter() - paused - max(0.0, step - took)
        longest = max(longest, took - alone, overrun)
    return longest * 1000


def checkpoints(backend: Any, state: Any, storage: FilesystemCheckpointStorage, keys: int, rounds: int,
                first_id: int, rng: random.Random, value: Callable[[int], Any], changed: float,
                interval_s: float) -> dict[str, list[float]]:
    """``rounds`` asynchronous checkpoints, then ``rounds`` taken at once, ``changed`` percent of
    the keys changed in each interval (spread over ``interval_s``, going on while the
    asynchronous part runs); durations in ms."""
    figures: dict[str, list[float]] = {"sync": [], "async": [], "stall": [], "both at once": []}
    count = max(1, int(keys * changed / 100))
    change(backend, state, keys, count, value, rng)
    for n in range(rounds):
        started = time.perf_counter()
        part = backend.snapshot_async(CheckpointId(first_id + n), storage)
        figures["sync"].append((time.perf_counter() - started) * 1000)
        done: list[float] = []

        def write(part: Any = part, done: list[float] = done) -> None:
            began = time.perf_counter()
            part.run()
            done.append((time.perf_counter() - began) * 1000)

        writer = threading.Thread(target=write)
        writer.start()
        # meanwhile, the next interval's changes
        figures["stall"].append(change_paced(backend, state, keys, count, value, rng, interval_s, writer))
        writer.join()
        figures["async"].append(done[0])
        backend.notify_checkpoint_complete(CheckpointId(first_id + n))
    for n in range(rounds):
        change(backend, state, keys, count, value, rng)
        started = time.perf_counter()
        backend.snapshot(CheckpointId(first_id + rounds + n), storage)
        figures["both at once"].append((time.perf_counter() - started) * 1000)
    return figures


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.0, help="RocksDB state size in GB (default 1.0)")
    parser.add_argument("--heap-keys", type=int, default=1_000_000)
    parser.add_argument("--heap-checkpoints", type=int, default=10, help="heap checkpoints of each kind (default 10)")
    parser.add_argument("--checkpoints", type=int, default=50, help="checkpoints of each kind (default 50)")
    parser.add_argument("--changed", type=float, default=1.0,
                        help="percent of the keys changed in each checkpoint interval (default 1)")
    parser.add_argument("--interval-s", type=float, default=2.0,
                        help="the checkpoint interval the changes are spread over (default 2)")
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.gb, args.heap_keys, args.checkpoints, args.heap_checkpoints = 0.02, 20_000, 3, 3
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-async-"))
    rng = random.Random(7)
    pool = [os.urandom(VALUE_BYTES) for _ in range(4096)]
    rows = []
    try:
        storage = FilesystemCheckpointStorage(work / "storage")
        keys = int(args.gb * (1 << 30) / VALUE_BYTES)
        rocks = RocksDBStateBackend(work / "rocks", FULL, MAX_P, options=RocksDBOptions())
        value = lambda k: pool[k % len(pool)][:-8] + k.to_bytes(8, "big")  # noqa: E731 - incompressible
        state = fill(rocks, keys, value, "rocksdb fill")
        rocks.settle()
        rocks.snapshot(CheckpointId(1), storage)  # the first checkpoint uploads everything
        rocks.notify_checkpoint_complete(CheckpointId(1))
        print(f"  rocksdb: {directory_bytes(work / 'storage') / (1 << 30):.2f} GiB in checkpoint storage",
              file=sys.stderr, flush=True)
        rows.append((f"RocksDB, {args.gb:g} GB, incremental", checkpoints(rocks, state, storage, keys, args.checkpoints,
                                                                         2, rng, value, args.changed,
                                                                         args.interval_s)))
        rocks.close()
        heap = HashMapStateBackend(FULL, MAX_P)
        heap_state = fill(heap, args.heap_keys, lambda k: k, "heap fill")
        rows.append((f"heap, {args.heap_keys:,} keys, full", checkpoints(heap, heap_state, storage, args.heap_keys,
                                                                         args.heap_checkpoints, 1000, rng, lambda k: k,
                                                                         args.changed, args.interval_s)))
        heap.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ncheckpoint durations in ms ({args.checkpoints} RocksDB and {args.heap_checkpoints} heap checkpoints of each "
          f"kind; {args.changed:g}% of the keys changed in each interval)\n")
    print(f"{'backend':<32} {'part':<28} {'min':>8} {'p50':>8} {'p99':>8} {'max':>8}")
    for label, figures in rows:
        for part, values in figures.items():
            name = {"sync": "synchronous (thread held)", "async": "asynchronous (in background)",
                    "stall": "longest pause during async",
                    "both at once": "both at once (before)"}[part]
            print(f"{label:<32} {name:<28} {min(values):8.1f} {statistics.median(values):8.1f} "
                  f"{percentile(values, 99):8.1f} {max(values):8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
