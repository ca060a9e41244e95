"""RocksDB memory of a worker with 2 and 8 tasks: one shared budget against a cache per task.

Each run is a fresh process that plays one stage worker's state: ``--tasks`` RocksDB backends (one
per task, each its own database, as ``runtime.worker.tasks`` builds them), every task writing
``--keys`` keys of ``--value-bytes`` into a value state and reading a tenth of them back, round
robin over the tasks (a write-heavy load: the memtables fill and flush, the cache fills).

* ``shared``: what a stage worker does: every database shares one ``RocksDBMemory`` of
  ``--budget-mib`` (``TIDEMARK_ROCKSDB__MEMORY_BYTES``; memtables charged to the cache up to half).
* ``per-task``: the peer, what a worker did before: each database its own 64 MiB block cache and
  64 MiB of write buffers (``RocksDBOptions()``'s defaults), so memory grows with the tasks.

Every 0.2 s the run samples what RocksDB reports (the block caches' usage, which holds the data,
index and filter blocks and the memtables charged to it; the memtables; the table readers'
memory outside the cache) and the process's resident set; it prints the peaks. Each configuration
runs ``--rounds`` times, interleaved; the table gives min / median / max of each peak and the
ratio of ``per-task`` to ``shared``.

    .venv/bin/python bench/bench_rocksdb_memory.py --tasks 2 8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MIB = 1 << 20


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _child(tasks: int, mode: str, keys: int, value_bytes: int, budget_mib: int) -> dict[str, float]:
    from tidemark.state import KeyGroupRange, RocksDBStateBackend, ValueStateDescriptor, assign_to_key_group
    from tidemark.state.rocksdb.options import RocksDBMemory

    baseline = _rss_bytes()
    memory = RocksDBMemory.budget(budget_mib * MIB) if mode == "shared" else None
    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-rocksdb-"))
    step = 128 // tasks
    backends = [RocksDBStateBackend(root / f"task-{n}", KeyGroupRange(n * step, 127 if n == tasks - 1 else
                                                                      (n + 1) * step - 1), 128, memory=memory)
                for n in range(tasks)]
    peaks = {"rocksdb": 0.0, "cache": 0.0, "memtables": 0.0, "readers": 0.0, "rss": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            sizes = [b.size() for b in backends]  # what the worker's state metrics report
            cache = sum({s.block_cache: s.block_cache_bytes or 0 for s in sizes}.values())
            memtables = sum(state.memtable_bytes or 0 for s in sizes for state in s.states.values())
            readers = sum(f.property_int_value("rocksdb.estimate-table-readers-mem") or 0
                          for b in backends for f in (b._db, *b._cfs.values()))  # outside the cache
            figures = {"cache": cache, "memtables": memtables, "readers": readers,
                       "rocksdb": cache + readers,  # the memtables are charged to the caches, in their usage
                       "rss": _rss_bytes() - baseline}
            for name, value in figures.items():
                peaks[name] = max(peaks[name], value)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    value = "v" * value_bytes
    states = [b.get_state(ValueStateDescriptor("value")) for b in backends]
    keys_of: list[list[int]] = [[] for _ in range(tasks)]
    key = 0
    while any(len(own) < keys for own in keys_of):  # each task's keys, by the key groups it owns
        own = keys_of[min(assign_to_key_group(key, 128) // step, tasks - 1)]
        if len(own) < keys:
            own.append(key)
        key += 1
    started = time.monotonic()
    for index in range(keys):
        for backend, state, own in zip(backends, states, keys_of):
            backend.set_current_key(own[index])
            state.update(value)
            if index % 10 == 0:
                backend.set_current_key(own[index // 2])
                state.value()
    elapsed = time.monotonic() - started
    time.sleep(0.5)
    done.set()
    sampler.join()
    for backend in backends:
        backend.close()
    return {**{k: v / MIB for k, v in peaks.items()}, "writes_per_s": keys * tasks / elapsed}


def _run(tasks: int, mode: str, args: argparse.Namespace) -> dict[str, float]:
    result = subprocess.run([sys.executable, __file__, "--child", mode, "--tasks", str(tasks), "--keys", str(args.keys),
                             "--value-bytes", str(args.value_bytes), "--budget-mib", str(args.budget_mib)],
                            capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": "src"})
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--keys", type=int, default=60_000, help="keys each task writes")
    parser.add_argument("--value-bytes", type=int, default=1000)
    parser.add_argument("--budget-mib", type=int, default=64, help="the shared budget")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["shared", "per-task"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.tasks[0], args.child, args.keys, args.value_bytes, args.budget_mib)))
        return
    runs: dict[tuple[int, str], list[dict[str, float]]] = {}
    total = args.rounds * len(args.tasks) * 2
    for round_ in range(args.rounds):
        for tasks in args.tasks:
            for mode in ("shared", "per-task"):
                runs.setdefault((tasks, mode), []).append(_run(tasks, mode, args))
                print(f"  [{sum(map(len, runs.values()))}/{total}] round {round_ + 1}: {tasks} tasks, {mode}",
                      file=sys.stderr, flush=True)

    def spread(values: list[float]) -> str:
        return f"{min(values):7.0f} {statistics.median(values):7.0f} {max(values):7.0f}"

    print(f"\nRocksDB memory, {args.keys} keys x {args.value_bytes} B per task, shared budget {args.budget_mib} MiB, "
          f"{args.rounds} rounds (MiB: min median max)")
    print(f"{'tasks':>5} {'memory':>9} | {'RocksDB (cache + readers)':>25} | {'memtables':>23} | "
          f"{'RSS growth':>23} | {'writes/s':>9}")
    for (tasks, mode), results in sorted(runs.items()):
        print(f"{tasks:>5} {mode:>9} | {spread([r['rocksdb'] for r in results]):>25} | "
              f"{spread([r['memtables'] for r in results]):>23} | {spread([r['rss'] for r in results]):>23} | "
              f"{statistics.median(r['writes_per_s'] for r in results):9.0f}")
    for tasks in args.tasks:
        shared, own = runs[(tasks, "shared")], runs[(tasks, "per-task")]
        ratio = statistics.median(r["rss"] for r in own) / max(1.0, statistics.median(r["rss"] for r in shared))
        print(f"{tasks} tasks: per-task caches / shared budget, median RSS growth: {ratio:.2f}x")
    grow = (statistics.median(r["rss"] for r in runs[(max(args.tasks), "shared")])
            - statistics.median(r["rss"] for r in runs[(min(args.tasks), "shared")]))
    print(f"shared budget: RSS growth from {min(args.tasks)} to {max(args.tasks)} tasks {grow:+.0f} MiB "
          f"(budget {args.budget_mib} MiB)")


if __name__ == "__main__":
    main()
