"""A job's metrics: each stage worker's and, at the end, the supervisor's (names are the contract in
docs/operations.md; Flink's task metrics in brackets)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from tidemark.state.sizes import BackendSize, StateSize

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

RECORDS_IN = Counter("tidemark_worker_records_in_total", "Records read (numRecordsIn)", ["job", "task"])
RECORDS_OUT = Counter("tidemark_worker_records_out_total", "Records written (numRecordsOut)", ["job", "task"])
CONSUMER_LAG = Gauge("tidemark_worker_consumer_lag_records",
                     "Records behind the end of a source partition (records-lag)", ["job", "topic", "partition"])
ALIGNMENT = Histogram("tidemark_worker_alignment_seconds",
                      "Barrier alignment time (checkpointAlignmentTime)", ["job"], buckets=_SECONDS)
SNAPSHOT_SYNC = Histogram("tidemark_worker_snapshot_sync_seconds",
                          "Synchronous part of task snapshots (sync checkpoint duration)", ["job"],
                          buckets=_SECONDS)
SNAPSHOT_ASYNC = Histogram("tidemark_worker_snapshot_async_seconds",
                           "Asynchronous part of task snapshots (async checkpoint duration)", ["job"],
                           buckets=_SECONDS)
RECORDS_SKIPPED = Counter("tidemark_worker_records_skipped_total",
                          "Records a stage could not handle and skipped (error policy skip or dead-letter)",
                          ["job", "topic", "reason"])
RESTORE_DURATION = Gauge("tidemark_worker_restore_duration_seconds",
                         "Duration of the last state restore (restore duration)", ["job"])

WATERMARK = Gauge("tidemark_worker_watermark_timestamp_seconds",
                  "Event-time watermark of a stage worker as a Unix time (currentInputWatermark); "
                  "absent while the stage has none", ["job", "stage"])
WATERMARK_LAG = Gauge("tidemark_worker_watermark_lag_seconds",
                      "Wall clock minus the stage worker's watermark (how far event time trails)", ["job", "stage"])
TIMERS_REGISTERED = Counter("tidemark_worker_timers_registered_total",
                            "Timers registered by the stage's function (deduplicated per key and time)",
                            ["job", "stage", "domain"])
TIMERS_FIRED = Counter("tidemark_worker_timers_fired_total", "Timers fired (on_timer calls)",
                       ["job", "stage", "domain"])
TIMERS_PENDING = Gauge("tidemark_worker_timers", "Timers registered and not fired yet, in the worker's tasks",
                       ["job", "stage", "domain"])
LATE_RECORDS = Counter("tidemark_worker_late_records_total",
                       "Records behind the stage's watermark: dropped, sent to the late-data topic or processed",
                       ["job", "stage", "action"])

STATE_ENTRIES = Gauge("tidemark_worker_state_entries",
                      "Entries of a keyed state in the worker's tasks at its last checkpoint: values, lists and "
                      "map entries (RocksDB: its estimate)", ["job", "stage", "state"])
STATE_BYTES = Gauge("tidemark_worker_state_bytes",
                    "Bytes of a keyed state in the worker's tasks at its last checkpoint (RocksDB: live SST files "
                    "and memtables; heap: serialized, estimated from a sample)", ["job", "stage", "state"])
ROCKSDB_LIVE_SST = Gauge("tidemark_worker_rocksdb_live_sst_bytes",
                         "RocksDB live SST files of a state (rocksdb.live-sst-files-size)", ["job", "stage", "state"])
ROCKSDB_MEMTABLES = Gauge("tidemark_worker_rocksdb_memtable_bytes",
                          "RocksDB memtables of a state (rocksdb.cur-size-all-mem-tables)", ["job", "stage", "state"])
ROCKSDB_PENDING_COMPACTION = Gauge("tidemark_worker_rocksdb_pending_compaction_bytes",
                                   "Bytes RocksDB estimates its compactions of a state still have to rewrite "
                                   "(rocksdb.estimate-pending-compaction-bytes)", ["job", "stage", "state"])
ROCKSDB_BLOCK_CACHE = Gauge("tidemark_worker_rocksdb_block_cache_bytes",
                            "RocksDB block cache in use by the worker's tasks (rocksdb.block-cache-usage)",
                            ["job", "stage"])

BATCH_DURATION = Histogram("tidemark_worker_batch_duration_seconds",
                           "Time a stage worker took to process a micro-batch: its records through the "
                           "operators, the output written, the control plane", ["job", "stage"], buckets=_SECONDS)
CPU_SECONDS = Counter("tidemark_worker_cpu_seconds_total",
                      "CPU time of the stage worker's processes: its Python process, its SparkSession's JVM "
                      "and their children", ["job", "stage"])
RESIDENT_MEMORY = Gauge("tidemark_worker_resident_memory_bytes",
                        "Resident memory of the stage worker's processes: its Python process, its "
                        "SparkSession's JVM and their children", ["job", "stage"])
JVM_HEAP_USED = Gauge("tidemark_worker_jvm_heap_used_bytes",
                      "Heap in use in the stage worker's JVM (MemoryMXBean heap used)", ["job", "stage"])
JVM_HEAP_MAX = Gauge("tidemark_worker_jvm_heap_max_bytes",
                     "Largest heap the stage worker's JVM may take (MemoryMXBean heap max, -Xmx)", ["job", "stage"])


def record_state_sizes(job: str, stage: str, sizes: Iterable[BackendSize]) -> None:
    """The state gauges of a stage worker: each state summed over its tasks' backends, each block
    cache once (the tasks of a worker share one)."""
    states: dict[str, list[StateSize]] = {}
    caches: dict[int, int] = {}  # a cache the tasks share counts once
    for size in sizes:
        for name, state in size.states.items():
            states.setdefault(name, []).append(state)
        if size.block_cache_bytes is not None:
            caches[size.block_cache] = size.block_cache_bytes
    for name, parts in states.items():
        STATE_ENTRIES.labels(job, stage, name).set(sum(p.entries for p in parts))
        STATE_BYTES.labels(job, stage, name).set(sum(p.bytes for p in parts))
        for gauge, figure in ((ROCKSDB_LIVE_SST, "live_sst_bytes"), (ROCKSDB_MEMTABLES, "memtable_bytes"),
                              (ROCKSDB_PENDING_COMPACTION, "pending_compaction_bytes")):
            values = [getattr(p, figure) for p in parts if getattr(p, figure) is not None]
            if values:
                gauge.labels(job, stage, name).set(sum(values))
    if caches:
        ROCKSDB_BLOCK_CACHE.labels(job, stage).set(sum(caches.values()))


def init_worker_metrics(job: str) -> None:
    """Create the unlabelled-by-task children at zero so dashboards have data from the start."""
    for histogram in (ALIGNMENT, SNAPSHOT_SYNC, SNAPSHOT_ASYNC):
        histogram.labels(job)
    RESTORE_DURATION.labels(job).set(0)


def init_time_metrics(job: str, stage: str) -> None:
    """The timer and late-record series of a stage at zero (the watermark gauges appear with the
    stage's first watermark)."""
    for domain in ("event-time", "processing-time"):
        TIMERS_REGISTERED.labels(job, stage, domain)
        TIMERS_FIRED.labels(job, stage, domain)
        TIMERS_PENDING.labels(job, stage, domain)
    for action in ("dropped", "side-output", "processed"):
        LATE_RECORDS.labels(job, stage, action)


# the supervisor's, per job
RESTARTS = Counter("tidemark_job_restarts_total", "Failovers of a job (a worker died and every stage was restored)",
                   ["job"])
EPOCH = Gauge("tidemark_job_epoch", "Epoch of the job's current attempt", ["job"])
RUNNING = Gauge("tidemark_job_running", "1 while every stage of the job's current attempt runs", ["job"])


def clear_worker_metrics() -> None:
    """Drop every series of the worker's metrics (a process that moves to another job's run,
    runtime.placement.idle_workers: the earlier job's series would be reported on)."""
    for metric in (RECORDS_IN, RECORDS_OUT, CONSUMER_LAG, ALIGNMENT, SNAPSHOT_SYNC, SNAPSHOT_ASYNC, RECORDS_SKIPPED,
                   RESTORE_DURATION, WATERMARK, WATERMARK_LAG, TIMERS_REGISTERED, TIMERS_FIRED, TIMERS_PENDING,
                   LATE_RECORDS, STATE_ENTRIES, STATE_BYTES, ROCKSDB_LIVE_SST, ROCKSDB_MEMTABLES,
                   ROCKSDB_PENDING_COMPACTION, ROCKSDB_BLOCK_CACHE, BATCH_DURATION, CPU_SECONDS, RESIDENT_MEMORY,
                   JVM_HEAP_USED, JVM_HEAP_MAX):
        metric.clear()
