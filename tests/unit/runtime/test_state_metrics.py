"""A stage worker's state gauges: each state summed over its tasks' backends, a shared cache once."""

from __future__ import annotations

from prometheus_client import REGISTRY

from tidemark.runtime.job.metrics import clear_worker_metrics, record_state_sizes
from tidemark.state.sizes import BackendSize, StateSize


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_each_state_is_summed_over_the_tasks_and_rocksdb_figures_only_where_reported() -> None:
    clear_worker_metrics()
    heap = BackendSize({"count": StateSize(10, 1000)})
    rocks = [BackendSize({"count": StateSize(5, 700, 500, 200, 0), "seen": StateSize(3, 90, 0, 90, 7)}, 4096, 1),
             BackendSize({"count": StateSize(6, 800, 600, 200, 1)}, 8192, 2),
             BackendSize({"count": StateSize(0, 0, 0, 0, 0)}, 8192, 2)]  # sharing the second's cache
    record_state_sizes("heap-job", "counts", [heap, BackendSize({"count": StateSize(2, 150)})])
    record_state_sizes("rocks-job", "counts", rocks)
    assert _value("tidemark_worker_state_entries", job="heap-job", stage="counts", state="count") == 12
    assert _value("tidemark_worker_state_bytes", job="heap-job", stage="counts", state="count") == 1150
    assert _value("tidemark_worker_rocksdb_live_sst_bytes", job="heap-job", stage="counts", state="count") is None
    assert _value("tidemark_worker_rocksdb_block_cache_bytes", job="heap-job", stage="counts") is None
    assert _value("tidemark_worker_state_entries", job="rocks-job", stage="counts", state="count") == 11
    assert _value("tidemark_worker_rocksdb_live_sst_bytes", job="rocks-job", stage="counts", state="count") == 1100
    assert _value("tidemark_worker_rocksdb_memtable_bytes", job="rocks-job", stage="counts", state="seen") == 90
    assert _value("tidemark_worker_rocksdb_pending_compaction_bytes", job="rocks-job", stage="counts",
                  state="seen") == 7
    assert _value("tidemark_worker_rocksdb_block_cache_bytes", job="rocks-job", stage="counts") == 12288
    clear_worker_metrics()  # a worker moving to another job's run reports none of these
    assert _value("tidemark_worker_state_entries", job="rocks-job", stage="counts", state="count") is None
