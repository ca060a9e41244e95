"""Checkpoint duration, bytes per checkpoint and recovery time: changelog on versus off.

Uses ``KAFKA_BOOTSTRAP_SERVERS`` when set, else starts the embedded broker for the run. Prints one
table (rows = state size x mode) and the ratio p99(on) / p99(off) per size, and says whether
issue #5's target is met: at 1 GB of state, p99 checkpoint duration with the changelog at most one
fifth of the duration without it.

    .venv/bin/python bench/bench_changelog_checkpoints.py                 # 10 MB, 100 MB, 1 GB
    .venv/bin/python bench/bench_changelog_checkpoints.py --sizes 10,100
    .venv/bin/python bench/bench_changelog_checkpoints.py --quick         # smoke run, seconds

The job (the same in both modes): one RocksDB-backed keyed task owning all ``128`` key groups,
one ``ValueState`` of ~1 KiB incompressible bytes per int key. ``--sizes`` are in MB of values
(``size * 1024`` keys). Between two checkpoints ``--update-fraction`` of the key count receive an
update (uniformly random keys, the same sequence in both modes), as a steady stream would.

Per size the state is built once (progress on stderr), the fill's compactions are let settle, and
it is snapshotted once (``base``). Both modes start from a task restored from that snapshot, so
they run on the same SST layout:

* **off**: ``RocksDBStateBackend.snapshot`` (incremental native snapshot: memtable flush, every
  new SST hashed and written with fsync to filesystem checkpoint storage under ``<job>/shared``,
  private files under ``<job>/chk-<id>``). Bytes/cp = bytes the snapshot newly wrote.
* **on**: ``ChangelogStateBackend(RocksDBStateBackend, ChangelogWriter)`` writing every change to a
  real changelog topic; checkpoint = ``snapshot(checkpoint_id)`` (persist: wait until every change
  is acked, return the ranges) then ``notify_checkpoint_complete``. The base snapshot plays the
  task's first materialization. Every ``--materialize-every`` checkpoints (at the middle of each
  period, so the last checkpoint lies half a period after the last materialization: the average
  case for recovery) the materializer's own code runs, outside the checkpoint path and not timed
  as part of it: ``materialize`` folds the completed checkpoint into a ``TaskReplica`` (rebuilt
  from the base + ranges the first time, extended afterwards) and writes its incremental snapshot
  (every file shared) under ``<job>/materialized/<task>``; the task then takes the
  ``MaterializationEvent`` (``on_materialization_event``: later ranges start after it). Bytes/cp =
  changelog record bytes appended during the interval (written continuously, made durable by the
  checkpoint); "mat MB/cp" = materialized bytes newly written, spread over all checkpoints.

Checkpoints are count-driven (no wall-clock interval) and run on the task thread with nothing
else in between, so a duration is exactly the task-side cost of one checkpoint (sync + upload),
as Flink's checkpoint duration measures it. The first ``--warmup`` checkpoints of each run are
taken but not counted (their durations are printed): a fresh idempotent producer's first
delivery waits for its producer id, up to ~1 s on the embedded broker, once per task attempt
and independent of the state size. p50 / p99 are nearest-rank over the measured checkpoints:
with fewer than 100 of them p99 is the maximum.

Recovery: after the last checkpoint one more interval of updates is made (lost by the "failure";
in changelog mode those records are in the topic after the checkpoint's ranges), the task is
closed, and a fresh backend restores the last checkpoint: off = download every file of the last
incremental snapshot and open it; on = ``ChangelogStateBackend.restore`` (the latest
materialization's files, then exactly the changelog ranges, via ``restore_from_changelog``).
Sampled keys (all keys when there are at most 200,000) are checked against the checkpointed
values afterwards (not timed); a mismatch stops the bench.

Disk: checkpoint and materialization files that no retained (last ``RETAINED``) checkpoint or
materialization references are deleted as the checkpoint-store would (not timed); every temporary
directory is removed at the end. Peak disk use is about 5x the largest state size.
"""

from __future__ import annotations

import argparse
import array
import gc
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from tidemark.broker.embedded import kafka_or_embedded
from tidemark.changelog import (
    ChangelogReader,
    ChangelogSource,
    ChangelogWriter,
    changelog_topic,
)
from tidemark.kafka.admin import ensure_topics
from tidemark.kafka.topics import TopicNames
from tidemark.materializer import TaskCheckpoint, TaskReplica, materialize
from tidemark.protocol.messages import MaterializationRef, StateHandle
from tidemark.state import KeyedSnapshot, KeyGroupRange, RocksDBOptions, RocksDBStateBackend, ValueStateDescriptor
from tidemark.changelog.backend import ChangelogStateBackend
from tidemark.storage.filesystem import FilesystemCheckpointStorage
from tidemark.storage.scoped import SnapshotStorage
from tidemark.types import CheckpointId, Epoch, JobId, MaterializationId, OperatorId, TaskId

MAX_P = 128
ALL = KeyGroupRange(0, MAX_P - 1)
OP = OperatorId("counts")
TASK = TaskId("counts#0")
VALUE_BYTES = 1024
KEYS_PER_MB = (1 << 20) // VALUE_BYTES
DESCRIPTOR = ValueStateDescriptor("value")
RETAINED = 2  # checkpoints / materializations whose files are kept (the store's default)
FULL_VERIFY_MAX_KEYS = 200_000
SAMPLE_KEYS = 3_000
REPLICA_MEMORY = 16 << 20  # the materializer's default TIDEMARK_MATERIALIZATION__REPLICA_MEMORY_BYTES


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def handles_bytes(handles: Iterable[StateHandle]) -> int:
    return sum(h.state_size_bytes for h in handles)


def replica_options() -> RocksDBOptions:
    """What the materializer service gives a replica (``settings.replica_options``)."""
    half = REPLICA_MEMORY // 2
    return RocksDBOptions(block_cache_bytes=half, write_buffer_total_bytes=half,
                          write_buffer_bytes=max(1 << 20, half // 4))


# --------------------------------------------------------------------------- the job


class Workload:
    """``keys`` int keys, each holding ``VALUE_BYTES`` of random (incompressible) bytes that
    depend only on (key, version); ``versions`` is the model of what the state must hold."""

    def __init__(self, keys: int, seed: int) -> None:
        self.keys = keys
        self.seed = seed
        self.pool = random.Random(seed).randbytes(1 << 20)
        self.versions = array.array("I", bytes(4 * keys))
        self._span = len(self.pool) - VALUE_BYTES + 8

    def value(self, key: int, version: int) -> bytes:
        start = (key * 2_654_435_761 + version * 40_503) % self._span
        return key.to_bytes(4, "big") + version.to_bytes(4, "big") + self.pool[start:start + VALUE_BYTES - 8]

    def reset(self) -> random.Random:
        """Every key back at version 0; the rng of the update stream (same for every mode)."""
        self.versions = array.array("I", bytes(4 * self.keys))
        return random.Random(self.seed + 1)


def fill(backend: RocksDBStateBackend, work: Workload, label: str) -> float:
    state = backend.get_state(DESCRIPTOR)
    set_key, update, value = backend.set_current_key, state.update, work.value
    started = time.perf_counter()
    step = max(1, work.keys // 10)
    for key in range(work.keys):
        set_key(key)
        update(value(key, 0))
        if (key + 1) % step == 0:
            elapsed = time.perf_counter() - started
            log(f"[{label}] building state: {key + 1:,}/{work.keys:,} keys "
                f"({(key + 1) / work.keys:.0%}, {(key + 1) / elapsed:,.0f} keys/s, {elapsed:.1f} s)")
    return time.perf_counter() - started


def updates(backend, state, work: Workload, rng: random.Random, count: int) -> list[int]:
    """One interval of the job: ``count`` updates of uniformly random keys."""
    keys = [rng.randrange(work.keys) for _ in range(count)]
    versions, set_key, update, value = work.versions, backend.set_current_key, state.update, work.value
    for key in keys:
        version = versions[key] + 1
        versions[key] = version
        set_key(key)
        update(value(key, version))
    return keys


def verify(backend, work: Workload, expected: array.array, recent: Sequence[int],
           lost: Sequence[int], label: str) -> int:
    """Check restored values against the model; returns how many keys were checked."""
    if work.keys <= FULL_VERIFY_MAX_KEYS:
        keys: Iterable[int] = range(work.keys)
    else:
        rng = random.Random(7)
        keys = sorted({*(rng.randrange(work.keys) for _ in range(SAMPLE_KEYS)), *recent[:1000], *lost[:1000]})
    state = backend.get_state(DESCRIPTOR)
    checked = 0
    for key in keys:
        backend.set_current_key(key)
        if state.value() != work.value(key, expected[key]):
            raise SystemExit(f"[{label}] restored state is wrong for key {key} "
                             f"(expected version {expected[key]})")
        checked += 1
    return checked


# --------------------------------------------------------------------------- results


@dataclass
class ModeResult:
    mode: str
    durations: list[float] = field(default_factory=list)  # measured checkpoints only
    written: list[int] = field(default_factory=list)
    warmup: list[float] = field(default_factory=list)  # the first checkpoints, not counted
    materialized: list[tuple[str, float, int]] = field(default_factory=list)  # fold, s, bytes
    recovery_s: float = 0.0
    recovery_detail: str = ""
    verified: int = 0

    def record(self, warmup: bool, seconds: float, written: int) -> None:
        if warmup:
            self.warmup.append(seconds)
        else:
            self.durations.append(seconds)
            self.written.append(written)

    @property
    def p50(self) -> float:
        return percentile(self.durations, 0.50)

    @property
    def p99(self) -> float:
        return percentile(self.durations, 0.99)


@dataclass
class SizeResult:
    size_mb: int
    keys: int
    state_bytes: int
    fill_s: float
    off: ModeResult
    on: ModeResult


class Retention:
    """Deletes files no retained checkpoint (or materialization) references, as the store would."""

    def __init__(self, storage: FilesystemCheckpointStorage, keep_prefix: str) -> None:
        self.storage = storage
        self.keep_prefix = keep_prefix  # never deleted here (the base snapshot)
        self.live: list[set[str]] = []
        self.known: set[str] = set()

    def add(self, handles: Iterable[StateHandle]) -> None:
        paths = {f.path for h in handles for f in h.files}
        self.live = [*self.live[-(RETAINED - 1):], paths]
        keep = set().union(*self.live)
        for path in self.known - keep:
            if not path.startswith(self.keep_prefix):
                self.storage.delete(path)
        self.known = keep


# --------------------------------------------------------------------------- one size


@dataclass(frozen=True)
class Config:
    checkpoints: int
    warmup: int
    fraction: float
    materialize_every: int
    partitions: int


def build_base(work_dir: Path, storage: FilesystemCheckpointStorage, work: Workload,
               label: str) -> tuple[tuple[StateHandle, ...], float]:
    backend = RocksDBStateBackend(work_dir / "fill", ALL, MAX_P, operator_id=OP)
    try:
        fill_s = fill(backend, work, label)
        log(f"[{label}] letting the fill's compactions settle ...")
        began = time.perf_counter()
        backend.settle(timeout_s=600)
        log(f"[{label}] settled in {time.perf_counter() - began:.1f} s; writing the base snapshot ...")
        scoped = SnapshotStorage(storage, "base/chk-0", "base/shared", all_shared=True)  # a materialization
        handles = backend.snapshot(CheckpointId(0), scoped).handles
    finally:
        backend.close()
        shutil.rmtree(work_dir / "fill", ignore_errors=True)
    return handles, fill_s


def run_off(work_dir: Path, storage: FilesystemCheckpointStorage, base: Sequence[StateHandle],
            work: Workload, cfg: Config, label: str) -> ModeResult:
    result, job = ModeResult("off"), f"off-{uuid.uuid4().hex[:6]}"
    per_interval = max(1, round(work.keys * cfg.fraction))
    rng = work.reset()
    retention = Retention(storage, "base/")
    backend = RocksDBStateBackend(work_dir / "off-task", ALL, MAX_P, operator_id=OP)
    try:
        backend.restore([KeyedSnapshot(ALL, tuple(base))], storage)
        state = backend.get_state(DESCRIPTOR)
        last: tuple[StateHandle, ...] = ()
        recent: list[int] = []
        total = cfg.warmup + cfg.checkpoints
        for cp in range(1, total + 1):
            recent = updates(backend, state, work, rng, per_interval)
            scoped = SnapshotStorage(storage, f"{job}/chk-{cp}", f"{job}/shared")
            began = time.perf_counter()
            last = backend.snapshot(CheckpointId(cp), scoped).handles
            seconds, written = time.perf_counter() - began, sum(h.checkpointed_size_bytes for h in last)
            result.record(cp <= cfg.warmup, seconds, written)
            retention.add(last)
            if cp % 10 == 0 or cp == total:
                log(f"[{label} off] checkpoint {cp}/{total}: {seconds * 1e3:.0f} ms, "
                    f"{written / 1e6:.2f} MB")
        expected = array.array("I", work.versions)
        lost = updates(backend, state, work, rng, per_interval)  # after the last checkpoint
    finally:
        backend.close()
    fresh = None
    try:
        began = time.perf_counter()
        fresh = RocksDBStateBackend(work_dir / "off-recovered", ALL, MAX_P, operator_id=OP)
        fresh.restore([KeyedSnapshot(ALL, tuple(last))], storage)
        fresh.get_state(DESCRIPTOR)
        result.recovery_s = time.perf_counter() - began
        result.recovery_detail = f"{handles_bytes(last) / 1e6:,.0f} MB of files"
        result.verified = verify(fresh, work, expected, recent, lost, f"{label} off")
    finally:
        if fresh is not None:
            fresh.close()
    return result


def run_on(work_dir: Path, storage: FilesystemCheckpointStorage, base: Sequence[StateHandle],
           work: Workload, cfg: Config, client: dict[str, str], label: str) -> ModeResult:
    result, job = ModeResult("changelog"), JobId(f"on-{uuid.uuid4().hex[:6]}")
    per_interval = max(1, round(work.keys * cfg.fraction))
    rng = work.reset()
    spec = changelog_topic(TopicNames(f"bench-{job}"), job, OP, cfg.partitions)
    ensure_topics(AdminClient(client), [spec])

    def writer(epoch: int) -> ChangelogWriter:
        return ChangelogWriter(client, spec.name, partitions=cfg.partitions, max_parallelism=MAX_P,
                               job_id=job, task_id=TASK, epoch=Epoch(epoch))

    def reader() -> ChangelogReader:
        return ChangelogReader(client, partitions=cfg.partitions, max_parallelism=MAX_P)

    retention = Retention(storage, "base/")
    replica = TaskReplica(work_dir / "replica", replica_options())
    base_ref = MaterializationRef(MaterializationId(0), CheckpointId(0))
    base_source = ChangelogSource(ALL, tuple(base), (), base_ref)
    backend = ChangelogStateBackend(RocksDBStateBackend(work_dir / "on-task", ALL, MAX_P, operator_id=OP),
                                    writer(0), reader())
    fresh = None
    try:
        backend.restore([base_source], storage)
        state = backend.get_state(DESCRIPTOR)
        last: KeyedSnapshot | None = None
        recent: list[int] = []
        appended = backend.writer.appended_bytes
        materializations = 0
        total = cfg.warmup + cfg.checkpoints
        for cp in range(1, total + 1):
            recent = updates(backend, state, work, rng, per_interval)
            began = time.perf_counter()
            last = backend.snapshot(CheckpointId(cp), storage)
            backend.notify_checkpoint_complete(CheckpointId(cp))
            seconds, written = time.perf_counter() - began, backend.writer.appended_bytes - appended
            result.record(cp <= cfg.warmup, seconds, written)
            appended = backend.writer.appended_bytes
            if (cp - cfg.warmup) % cfg.materialize_every == cfg.materialize_every // 2:
                materializations += 1
                target = TaskCheckpoint(job, CheckpointId(cp), Epoch(0), MAX_P,
                                        last.to_task_snapshot(TASK, OP, 0))
                mid = MaterializationId(materializations)
                outcome = materialize(target, replica, storage, reader(), mid, int(time.time() * 1000))
                if not backend.notify_materialization(outcome.event):
                    raise SystemExit(f"[{label} on] the task refused materialization {mid}")
                replica.produced(mid)
                retention.add(outcome.event.state_handles)
                result.materialized.append((outcome.fold, outcome.duration_s, outcome.incremental_size_bytes))
                log(f"[{label} on] materialization {mid} of checkpoint {cp} ({outcome.fold}): "
                    f"{outcome.duration_s:.1f} s, {outcome.incremental_size_bytes / 1e6:.1f} MB new "
                    f"of {outcome.full_size_bytes / 1e6:.0f} MB, {outcome.read.applied:,} changes folded")
            if cp % 10 == 0 or cp == total:
                log(f"[{label} on] checkpoint {cp}/{total}: {seconds * 1e3:.0f} ms, "
                    f"{written / 1e6:.2f} MB appended")
        assert last is not None
        expected = array.array("I", work.versions)
        lost = updates(backend, state, work, rng, per_interval)  # in the topic, after the ranges
        backend.close()  # flushes: the lost interval's records really are in the changelog
        recovery_writer = writer(1)
        began = time.perf_counter()
        fresh = ChangelogStateBackend(
            RocksDBStateBackend(work_dir / "on-recovered", ALL, MAX_P, operator_id=OP), recovery_writer, reader())
        fresh.restore([last], storage)
        restored = fresh.last_restore
        assert restored is not None
        fresh.get_state(DESCRIPTOR)
        result.recovery_s = time.perf_counter() - began
        result.recovery_detail = (f"{handles_bytes(last.handles) / 1e6:,.0f} MB of files + "
                                  f"{restored.changelog.applied:,} changes")
        result.verified = verify(fresh, work, expected, recent, lost, f"{label} on")
    finally:
        backend.close()
        if fresh is not None:
            fresh.close()
        replica.close()
    return result


def run_size(size_mb: int, cfg: Config, client: dict[str, str], root: Path) -> SizeResult:
    label = f"{size_mb} MB"
    work_dir = root / f"size-{size_mb}"
    storage = FilesystemCheckpointStorage(work_dir / "storage")
    work = Workload(size_mb * KEYS_PER_MB, seed=size_mb)
    try:
        base, fill_s = build_base(work_dir, storage, work, label)
        state_bytes = handles_bytes(base)
        log(f"[{label}] state: {work.keys:,} keys, {state_bytes / 1e6:,.0f} MB of SST files; "
            f"{max(1, round(work.keys * cfg.fraction)):,} updates between checkpoints")
        off = run_off(work_dir, storage, base, work, cfg, label)
        on = run_on(work_dir, storage, base, work, cfg, client, label)
        gc.collect()  # free run_on's producers now (cycles via change listeners), not at shutdown
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return SizeResult(size_mb, work.keys, state_bytes, fill_s, off, on)


# --------------------------------------------------------------------------- report


def size_label(mb: int) -> str:
    return f"{mb // 1000} GB" if mb >= 1000 and mb % 1000 == 0 else f"{mb} MB"


def fmt_ms(values: Sequence[float]) -> str:
    return "/".join(f"{v * 1e3:.0f}" for v in values) + " ms" if values else "-"


def print_report(results: list[SizeResult], cfg: Config, broker: str, seconds: float) -> None:
    print(f"\nchangelog on vs off: one RocksDB task, {MAX_P} key groups, ~1 KiB values, "
          f"{cfg.fraction:.1%} of keys updated between checkpoints, {cfg.checkpoints} measured "
          f"checkpoints per run after {cfg.warmup} warm-up, materialization every "
          f"{cfg.materialize_every} checkpoints, "
          f"{cfg.partitions} changelog partitions, broker {broker}, {os.cpu_count()} cores, "
          f"run {seconds / 60:.1f} min")
    header = (f"{'state':<8}{'MB':>8}  {'mode':<10}{'cps':>4}{'p50 ms':>9}{'p99 ms':>9}"
              f"{'MB/cp':>8}{'mat MB/cp':>10}{'recovery s':>11}  recovery reads")
    print(header)
    print("-" * (len(header) + 22))
    for r in results:
        for m in (r.off, r.on):
            mat = (f"{sum(b for _, _, b in m.materialized) / len(m.durations) / 1e6:>10.2f}"
                   if m.mode == "changelog" else f"{'-':>10}")
            print(f"{size_label(r.size_mb):<8}{r.state_bytes / 1e6:>8,.0f}  {m.mode:<10}"
                  f"{len(m.durations):>4}{m.p50 * 1e3:>9.1f}{m.p99 * 1e3:>9.1f}"
                  f"{sum(m.written) / len(m.written) / 1e6:>8.2f}{mat}{m.recovery_s:>11.2f}  "
                  f"{m.recovery_detail}")
    print()
    for r in results:
        ratio = r.on.p99 / r.off.p99
        mats = ", ".join(f"{fold} {s:.1f} s/{b / 1e6:.0f} MB" for fold, s, b in r.on.materialized)
        print(f"{size_label(r.size_mb):<8} p99(on)/p99(off) = {ratio:.3f}  (1/{1 / ratio:.1f}); "
              f"p50 ratio {r.on.p50 / r.off.p50:.3f}; fill {r.keys / r.fill_s:,.0f} keys/s; "
              f"materializations: {mats or 'none'}; keys verified after recovery: "
              f"{r.off.verified:,} off, {r.on.verified:,} on; warm-up checkpoints (not counted) "
              f"off {fmt_ms(r.off.warmup)}, on {fmt_ms(r.on.warmup)}")
    gb = [r for r in results if r.size_mb == 1000]
    if gb:
        ratio = gb[0].on.p99 / gb[0].off.p99
        verdict = "MET" if ratio <= 0.2 else "NOT MET"
        print(f"\ntarget (1 GB: p99 with changelog <= 1/5 of without): {verdict} "
              f"(ratio {ratio:.3f})")
    else:
        print("\ntarget (1 GB: p99 with changelog <= 1/5 of without): not measured "
              "(1000 not in --sizes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="state sizes in MB, comma-separated "
                        "(default 10,100,1000; with --quick 2)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument("--checkpoints", type=int, default=None,
                        help="measured checkpoints per run (default 40; quick 8)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="checkpoints taken first in each run and not counted (default 2)")
    parser.add_argument("--update-fraction", type=float, default=0.01,
                        help="share of the keys updated between two checkpoints (default 0.01)")
    parser.add_argument("--materialize-every", type=int, default=None,
                        help="checkpoints between materializations (default 10; quick 4)")
    parser.add_argument("--partitions", type=int, default=8, help="changelog partitions")
    parser.add_argument("--work-dir", default=None, help="parent of the temporary directory")
    parser.add_argument("--show-durations", action="store_true",
                        help="also print every checkpoint duration")
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("2" if args.quick else "10,100,1000")).split(",") if s]
    cfg = Config(checkpoints=args.checkpoints or (8 if args.quick else 40), warmup=max(0, args.warmup),
                 fraction=args.update_fraction,
                 materialize_every=args.materialize_every or (4 if args.quick else 10),
                 partitions=args.partitions)
    if cfg.checkpoints < cfg.materialize_every or cfg.materialize_every < 2 or not sizes \
            or min(sizes) < 1 or not 0 < cfg.fraction <= 1:
        parser.error("need sizes >= 1, 0 < fraction <= 1, 2 <= materialize-every <= checkpoints")
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-cl-cp-", dir=args.work_dir))
    try:
        with kafka_or_embedded(root / "broker") as (bootstrap, broker):
            client = {"bootstrap.servers": bootstrap}
            results = [run_size(size, cfg, client, root) for size in sizes]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_report(results, cfg, "external" if broker is None else "embedded " + broker.describe(),
                 time.perf_counter() - started)
    if args.show_durations:
        print("\nevery measured checkpoint duration (ms), in order:")
        for r in results:
            for m in (r.off, r.on):
                print(f"{size_label(r.size_mb):<8}{m.mode:<10} "
                      + " ".join(f"{d * 1e3:.1f}" for d in m.durations))


if __name__ == "__main__":
    main()
