"""State backend benchmark: hot-path throughput, snapshot cost, RocksDB memory.

Run: ``.venv/bin/python bench/bench_state.py`` (about 2-3 minutes on 2 cores);
``--quick`` shrinks every size for a smoke run. Prints one table.

* pairs/s (best of 3 interleaved runs): ValueState ``value()`` + ``update()`` on int values, (a) on one current key and
  (b) with ``set_current_key`` before every pair over 100k distinct string keys; the raw
  rocksdict figure does ``get`` + ``put`` on the very key bytes and value bytes the backend
  writes, on a database with the same options (WAL off, same cache), no serialization.
* snapshots: 1M keys; RocksDB incremental (first = everything, taken once the fill's
  compactions settled; second after 1% of keys changed), RocksDB canonical full, heap full; time and bytes written.
* memory: peak RSS of a fresh process whose RocksDB backend holds 5M keys.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import rocksdict

from tidemark.state import (
    HashMapStateBackend,
    KeyGroupRange,
    RocksDBOptions,
    RocksDBStateBackend,
    ValueStateDescriptor,
)
from tidemark.keygroups import encode_key
from tidemark.state.rocksdb.options import RocksDBResources
from tidemark.state.rocksdb.table import key_prefix, namespace_part
from tidemark.state.serializers import DEFAULT_SERIALIZER
from tidemark.storage.filesystem import FilesystemCheckpointStorage

MAX_P = 128
FULL = KeyGroupRange(0, MAX_P - 1)
DISTINCT = 100_000  # more than the backend key cache (65,536): every set_current_key misses
HOT = 10_000
REPEATS = 3


def pairs_per_second(backend, pairs: int, distinct: int) -> tuple[float, float]:
    """(pairs/s on one key, pairs/s with ``set_current_key`` over ``distinct`` keys)."""
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    keys = [f"user-{i}" for i in range(distinct)]
    value, update, set_key = state.value, state.update, backend.set_current_key
    set_key(keys[0])
    started = time.perf_counter()
    for _ in range(pairs):
        update(value() + 1)
    same_key = pairs / (time.perf_counter() - started)
    for key in keys:  # warm: every key has a value, as in steady state
        set_key(key)
        update(1)
    started = time.perf_counter()
    for i in range(pairs):
        set_key(keys[i % distinct])
        update(value() + 1)
    return same_key, pairs / (time.perf_counter() - started)


def raw_pairs_per_second(path: Path, pairs: int, distinct: int) -> float:
    """rocksdict get+put on the backend's own key and value bytes (1 key: ``distinct=1``)."""
    resources = RocksDBResources(RocksDBOptions())
    db = rocksdict.Rdict(str(path), resources.db_options())
    db.set_write_options(resources.write_options())
    keys = [key_prefix(0, encode_key(f"user-{i}")) + namespace_part(b"") for i in range(distinct)]
    value = DEFAULT_SERIALIZER.serialize(1)
    get, put = db.get, db.put
    for key in keys:
        put(key, value)
    started = time.perf_counter()
    for i in range(pairs):
        key = keys[i % distinct]
        get(key)
        put(key, value)
    rate = pairs / (time.perf_counter() - started)
    db.close()
    return rate


def fill(backend, count: int, offset: int = 0) -> None:
    state = backend.get_state(ValueStateDescriptor("count", default=0))
    set_key, update = backend.set_current_key, state.update
    for i in range(count):
        set_key(i)
        update(i + offset)


def timed_snapshot(backend, checkpoint_id: int, storage, **kwargs) -> tuple[float, int]:
    started = time.perf_counter()
    handles = backend.snapshot(checkpoint_id, storage, **kwargs)
    return time.perf_counter() - started, sum(h.checkpointed_size_bytes for h in handles)


def snapshot_figures(work: Path, keys: int) -> list[tuple[str, str]]:
    storage = FilesystemCheckpointStorage(work / "checkpoints")
    rows = []
    rocks = RocksDBStateBackend(work / "rocks-snap", FULL, MAX_P)
    fill(rocks, keys)
    rocks.settle()  # let the fill's compactions finish, so #2 measures steady state
    seconds, size = timed_snapshot(rocks, 1, storage)
    rows.append((f"rocksdb incremental #1 ({keys:,} keys)", f"{seconds:.2f} s, {size / 1e6:.1f} MB"))
    fill(rocks, keys // 100, offset=7)
    seconds, size = timed_snapshot(rocks, 2, storage)
    stats = rocks.last_snapshot_stats
    new_sst = [p for p in stats.uploaded if p.startswith("shared/")]
    rows.append(("rocksdb incremental #2 (1% changed)",
                 f"{seconds:.2f} s, {size / 1e6:.2f} MB new: {len(new_sst)} new SST + "
                 f"{len(stats.uploaded) - len(new_sst)} metadata files; {len(stats.reused)} SST reused"))
    seconds, size = timed_snapshot(rocks, 3, storage, canonical=True)
    rows.append(("rocksdb full canonical", f"{seconds:.2f} s, {size / 1e6:.1f} MB"))
    rocks.close()
    heap = HashMapStateBackend(FULL, MAX_P)
    fill(heap, keys)
    seconds, size = timed_snapshot(heap, 4, storage)
    rows.append((f"heap full canonical ({keys:,} keys)", f"{seconds:.2f} s, {size / 1e6:.1f} MB"))
    heap.close()
    return rows


def peak_rss_kb() -> int:
    """VmHWM: this process's peak RSS (ru_maxrss would carry the parent's peak across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def memory_child(path: str, keys: int) -> None:
    """Runs in a fresh process: fill a RocksDB backend, print peak RSS as JSON."""
    baseline = peak_rss_kb()
    backend = RocksDBStateBackend(path, FULL, MAX_P)
    started = time.perf_counter()
    fill(backend, keys)
    seconds = time.perf_counter() - started
    backend._db.flush()
    peak = peak_rss_kb()
    backend.close()
    print(json.dumps({"baseline_kb": baseline, "peak_kb": peak, "fill_s": seconds}))


def memory_figures(work: Path, keys: int) -> list[tuple[str, str]]:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", str(work / "rocks-mem"), str(keys)],
        check=True, capture_output=True, text=True, timeout=600,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return [(f"rocksdb peak RSS holding {keys:,} keys",
             f"{result['peak_kb'] / 1024:.0f} MB (interpreter baseline "
             f"{result['baseline_kb'] / 1024:.0f} MB; fill {keys / result['fill_s']:,.0f} keys/s)")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--memory-child", nargs=2, metavar=("PATH", "KEYS"))
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child[0], int(args.memory_child[1]))
        return
    pairs, snap_keys, mem_keys = (
        (100_000, 100_000, 200_000) if args.quick else (1_000_000, 1_000_000, 5_000_000))
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-"))
    try:
        rows = run(work, pairs, snap_keys, mem_keys)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(name) for name, _ in rows)
    print(f"{'measure'.ljust(width)}  result")
    print(f"{'-' * width}  {'-' * 40}")
    for name, result in rows:
        print(f"{name.ljust(width)}  {result}")


def best_pairs(work: Path, pairs: int, distinct: int) -> dict[str, float]:
    """Best of ``REPEATS`` interleaved runs of every pair measure (the machine is shared)."""
    heap = HashMapStateBackend(FULL, MAX_P)
    rocks = RocksDBStateBackend(work / f"rocks-pairs-{distinct}", FULL, MAX_P)
    best: dict[str, float] = {}
    for attempt in range(REPEATS):
        heap_same, heap_keys = pairs_per_second(heap, pairs, distinct)
        rocks_same, rocks_keys = pairs_per_second(rocks, pairs // 3, distinct)
        measures = {
            "heap_same": heap_same, "heap_keys": heap_keys,
            "rocks_same": rocks_same, "rocks_keys": rocks_keys,
            "raw_keys": raw_pairs_per_second(work / f"raw-{distinct}-{attempt}", pairs // 3, distinct),
            "raw_same": raw_pairs_per_second(work / f"raw-1-{distinct}-{attempt}", pairs // 3, 1),
        }
        for name, value in measures.items():
            best[name] = max(best.get(name, 0.0), value)
    heap.close()
    rocks.close()
    return best


def run(work: Path, pairs: int, snap_keys: int, mem_keys: int) -> list[tuple[str, str]]:
    rows = []
    for distinct, label in ((HOT, "10k hot keys"), (DISTINCT, "100k keys, cache misses")):
        b = best_pairs(work, pairs, distinct)
        if distinct == HOT:
            rows += [("heap value()+update() pairs/s, one key", f"{b['heap_same']:,.0f}"),
                     ("rocksdb value()+update() pairs/s, one key",
                      f"{b['rocks_same']:,.0f} ({b['rocks_same'] / b['raw_same']:.0%} of raw)"),
                     ("raw rocksdict get+put pairs/s, one key", f"{b['raw_same']:,.0f}")]
        rows += [(f"heap set_current_key+pair/s, {label}", f"{b['heap_keys']:,.0f}"),
                 (f"rocksdb set_current_key+pair/s, {label}",
                  f"{b['rocks_keys']:,.0f} ({b['rocks_keys'] / b['raw_keys']:.0%} of raw)"),
                 (f"raw rocksdict get+put pairs/s, {label.split(',')[0]}", f"{b['raw_keys']:,.0f}")]
    rows += snapshot_figures(work, snap_keys)
    rows += memory_figures(work, mem_keys)
    return rows


if __name__ == "__main__":
    main()
