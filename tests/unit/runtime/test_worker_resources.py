"""A stage worker's resource metrics: its process tree's CPU and memory from /proc, counted on
across samples; a sample that fails never raises."""

from __future__ import annotations

import os
import time
from pathlib import Path

from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from tidemark.runtime.job.metrics import clear_worker_metrics
from tidemark.processes import parse_stat, process_tree
from tidemark.runtime.worker.resources import TreeCpu, WorkerResources

TICKS, PAGE = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int, comm: str, parent: int, utime: int, stime: int, cutime: int, cstime: int, rss_pages: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    # utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...
    return (f"{pid} ({comm}) S {parent} 1 1 0 -1 4194304 10 0 0 0 {utime} {stime} {cutime} {cstime} 20 0 "
            f"4 0 1234 100000 {rss_pages} 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n")


def _proc(root: Path, processes: dict[int, str]) -> Path:
    for pid, stat in processes.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "stat").write_text(stat)
    (root / "self").mkdir()  # not a pid: skipped
    (root / "uptime").write_text("1.0 1.0\n")
    return root


def _value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_a_stat_line_is_read_whatever_the_command_name_holds() -> None:
    usage = parse_stat(42, _stat(42, "java) (x", 7, 300, 100, 50, 50, 1000))
    assert (usage.pid, usage.parent) == (42, 7)
    assert usage.cpu_seconds == 500 / TICKS and usage.rss_bytes == 1000 * PAGE


def test_the_tree_is_the_root_and_its_descendants(tmp_path: Path) -> None:
    proc = _proc(tmp_path, {
        10: _stat(10, "python", 1, 100, 0, 20, 0, 100),  # the worker
        11: _stat(11, "java", 10, 400, 100, 0, 0, 1000),  # its JVM
        12: _stat(12, "python3 -m pyspark.daemon", 11, 50, 0, 0, 0, 10),  # a Spark Python worker
        20: _stat(20, "other", 1, 9999, 0, 0, 0, 9999),  # not in the tree
        21: "21 (torn",  # a process that ended while read
    })
    tree = process_tree(10, proc)
    assert sorted(p.pid for p in tree) == [10, 11, 12]
    assert sum(p.cpu_seconds for p in tree) == 670 / TICKS
    assert sum(p.rss_bytes for p in tree) == 1110 * PAGE
    assert process_tree(99, proc) == []


def test_the_cpu_count_goes_on_from_the_previous_sample_and_never_back() -> None:
    cpu = TreeCpu()
    assert cpu.advance(5.0) == 5.0  # the first sample: what the tree used since it started
    assert cpu.advance(7.5) == 2.5
    assert cpu.advance(6.0) == 0.0  # a child left the tree: the count goes on from there
    assert cpu.advance(6.5) == 0.5


def test_the_real_process_tree_uses_cpu_and_memory() -> None:
    before = sum(p.cpu_seconds for p in process_tree(os.getpid()))
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    tree = process_tree(os.getpid())
    assert tree[0].pid == os.getpid() and tree[0].rss_bytes > 10 * 2**20
    assert sum(p.cpu_seconds for p in tree) >= before + 0.1


def test_report_sets_the_process_metrics_and_survives_a_jvm_it_cannot_ask(tmp_path: Path) -> None:
    clear_worker_metrics()
    proc = _proc(tmp_path, {10: _stat(10, "python", 1, 100, 0, 0, 0, 100),
                            11: _stat(11, "java", 10, 100, 0, 0, 0, 300)})
    resources = WorkerResources("orders", "counts", jvm=object(), root=10, cpu=TreeCpu(), proc=proc)
    with capture_logs() as logs:
        resources.report()
        resources.report()  # the same failure again: logged once
    assert [(e["event"], e["what"]) for e in logs] == [("worker resources not measured", "jvm heap")]
    labels = {"job": "orders", "stage": "counts"}
    assert _value("tidemark_worker_cpu_seconds_total", **labels) == 200 / TICKS
    assert _value("tidemark_worker_resident_memory_bytes", **labels) == 400 * PAGE
    assert _value("tidemark_worker_jvm_heap_used_bytes", **labels) is None
    (proc / "11" / "stat").write_text(_stat(11, "java", 10, 150, 10, 0, 0, 500))
    resources.report()
    assert _value("tidemark_worker_cpu_seconds_total", **labels) == 260 / TICKS
    assert _value("tidemark_worker_resident_memory_bytes", **labels) == 600 * PAGE
    clear_worker_metrics()  # a worker moving to another job's run reports none of these
    assert _value("tidemark_worker_cpu_seconds_total", **labels) is None
    assert _value("tidemark_worker_resident_memory_bytes", **labels) is None


def test_a_worker_without_a_jvm_reports_its_processes_and_no_heap(tmp_path: Path) -> None:
    """A worker reading only channels starts no session: no heap to ask, nothing logged."""
    clear_worker_metrics()
    proc = _proc(tmp_path, {10: _stat(10, "python", 1, 100, 0, 0, 0, 100)})
    resources = WorkerResources("orders", "counts", jvm=None, root=10, cpu=TreeCpu(), proc=proc)
    with capture_logs() as logs:
        resources.report()
    assert logs == []
    assert _value("tidemark_worker_cpu_seconds_total", job="orders", stage="counts") == 100 / TICKS
    assert _value("tidemark_worker_jvm_heap_used_bytes", job="orders", stage="counts") is None
    clear_worker_metrics()
