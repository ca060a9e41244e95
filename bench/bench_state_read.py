"""Reading a RocksDB checkpoint's state at two sizes: time, records/s and every process's peak RSS.

For each of ``--sizes`` (default ``100MB 1GB``) a stage ``blobs`` of ``--parallelism`` RocksDB
tasks (default 4, max parallelism 128) is written with one value state ``blob``: ``size / 1 KiB``
keys, each holding 1,000 characters of base64 of random bytes (RocksDB's compression leaves them
about their size, so the state's size is real). It is written in each of ``--formats``:
``incremental``, the native SST sets of a RocksDB checkpoint (each task's
``snapshot(canonical=False)``, shared files under the job's ``shared/``), and ``canonical``, the
canonical full snapshot a savepoint holds; both under a ``_metadata``
(:class:`~tidemark.state_processor.writer.SavepointWriter`) the reader opens by path.

Each round reads the state in fresh processes, one reader after the other:

* ``python``: the Python reader as ``tidemark state read --format jsonl`` runs it
  (:func:`tidemark.state_processor.export.export_jsonl` into a file under the bench's directory,
  deleted after), one old task at a time;
* ``spark``: ``spark.read.format("tidemark-state")...load().count()`` in a ``local[--cores]``
  session (one input partition per old task, or per ``--key-groups-per-partition`` key groups;
  ``--driver-memory``, default 1g as Tidemark's sessions, bounds the JVM's heap; ``--java-options``,
  default :data:`tidemark.spark.state_source.READ_JAVA_OPTIONS`, ``--java-options=`` for the JVM's
  own defaults).

A sampler reads ``/proc/<pid>/status`` of the reader's whole process tree every 100 ms and keeps
each process's peak resident set (VmHWM), by kind: the reader's Python process (``driver``),
Spark's JVM (``jvm``), Spark's Python workers (``python worker``: ``pyspark.daemon`` and the
workers it forks, which restore and read the old tasks). Printed: per size, format, reader and
process kind, min / median / max over ``--rounds`` (default 2) of the peak RSS, and of the read's
records/s (rows over the time from the reader's start to its last row, the interpreter's and the
JVM's start-up left out), and of each kind's CPU seconds during the read (user and system, from
``/proc/<pid>/stat``, start-up left out) and the cores they kept busy (those CPU seconds over the
read's seconds); then the ratio of the medians of the largest size to the smallest per
process kind (the acceptance: within 10%, 0.90-1.10).

    PYTHONPATH=src .venv/bin/python bench/bench_state_read.py --sizes 100MB 1GB --rounds 2
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

JOB = "bench-state-read"
STAGE = "blobs"
STATE = "blob"
VALUE_CHARS = 1000  # base64 of 750 random bytes
KEY_BYTES = 1024  # what one key stands for in a size: its value, its key and RocksDB's overhead
MAX_PARALLELISM = 128
KINDS = ("driver", "jvm", "python worker")


def parse_size(text: str) -> int:
    units = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
    for unit, factor in units.items():
        if text.upper().endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- writing the state

def rows(keys: int) -> Iterator[tuple[str, str]]:
    for i in range(keys):
        yield f"key-{i:09d}", base64.b64encode(os.urandom(VALUE_CHARS * 3 // 4)).decode()


def write_state(url: str, size: int, fmt: str, parallelism: int, checkpoint_id: int) -> tuple[str, int, int]:
    """``(metadata path, keys, bytes of state files)`` of the state of ``size`` written as ``fmt``."""
    from tidemark.protocol.messages import TaskSnapshot
    from tidemark.state import ValueStateDescriptor
    from tidemark.state.snapshot import state_meta
    from tidemark.state_processor.bootstrap import StateData, write_rows
    from tidemark.state_processor.task_writer import StageWriter
    from tidemark.state_processor.writer import SavepointWriter, default_target
    from tidemark.storage import open_storage
    from tidemark.types import CheckpointId

    storage = open_storage(url)
    keys = size // KEY_BYTES
    descriptor = ValueStateDescriptor(STATE)
    target = default_target(JOB, f"{fmt}-{size >> 20}m", checkpoint_id)
    with SavepointWriter(storage, JOB, target, checkpoint_id=checkpoint_id,
                         max_parallelism=MAX_PARALLELISM) as savepoint:
        with StageWriter(STAGE, parallelism, MAX_PARALLELISM, "rocksdb", [state_meta(descriptor)]) as writer:
            write_rows(writer, [StateData(descriptor, rows(keys))], written_at_ms=int(time.time() * 1000),
                       progress=lambda line: progress(f"write {size >> 20} MiB {fmt}: {line}"))
            for index in sorted(writer.tasks):
                task = writer.tasks[index]
                if fmt == "canonical":
                    savepoint.add([task.finish(checkpoint_id, savepoint.files)])
                    continue
                keyed = task.backend.snapshot(CheckpointId(checkpoint_id), savepoint.files)  # incremental
                task.backend.close()
                a = task.assignment
                savepoint.add([TaskSnapshot(a.task_id, a.operator_id, a.subtask_index, a.key_group_start,
                                            a.key_group_end, state_handles=tuple(keyed.handles))])
        written = savepoint.commit()
    return written.path, keys, written.metadata.state_size_bytes


# ---------------------------------------------------------------------------- the readers (children)

READING = "reading"


def reading() -> float:
    """Tell the bench the read starts now (it notes each process's CPU time so far); the time."""
    print(READING, flush=True)
    return time.monotonic()


def read_python(url: str, path: str, work: Path) -> dict[str, Any]:
    from tidemark.state_processor import StateReader
    from tidemark.state_processor.export import export_jsonl
    from tidemark.storage import open_storage

    started = reading()
    output = work / "rows.jsonl"
    try:
        count = export_jsonl(StateReader.open(open_storage(url), JOB, path=path), output, "state", STAGE, STATE)
    finally:
        output.unlink(missing_ok=True)
    return {"rows": count, "seconds": time.monotonic() - started}


def read_spark(url: str, path: str, cores: int, key_groups_per_partition: int | None,
               driver_memory: str, java_options: str) -> dict[str, Any]:
    from tidemark.spark.session import SessionOptions, spark_session
    from tidemark.spark.state_source import FORMAT, register

    spark = spark_session(SessionOptions(master=f"local[{cores}]", app_name="bench-state-read",
                                         driver_memory=driver_memory, java_options=java_options))
    try:
        register(spark)
        options = {"job": JOB, "savepoint": path, "storage": url, "stage": STAGE, "state": STATE}
        if key_groups_per_partition:
            options["key_groups_per_partition"] = str(key_groups_per_partition)
        started = reading()
        count = spark.read.format(FORMAT).options(**options).load().count()
        return {"rows": count, "seconds": time.monotonic() - started}
    finally:
        spark.stop()


# ---------------------------------------------------------------------------- peak RSS of a tree

def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


def kind_of(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmdline.split(" ", 1)[0] or "org.apache.spark" in cmdline:
        return "jvm"
    if "pyspark" in cmdline:
        return "python worker"
    return "other"


class TreePeaks(threading.Thread):
    """Every ``interval_s``, each process of ``root``'s tree: its peak resident set (VmHWM) so far
    and the CPU time it has used (user and system, last seen)."""

    def __init__(self, root: int, interval_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root = root
        self.interval_s = interval_s
        self.peaks: dict[int, tuple[str, int]] = {}  # pid -> (kind, peak KiB)
        self.cpu_ticks: dict[int, int] = {}  # pid -> utime + stime, clock ticks
        self.cpu_at_mark: dict[int, int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.sample()
            self.done.wait(self.interval_s)

    def sample(self) -> None:
        from tidemark.processes import tree_pids

        for pid in tree_pids(self.root):
            kind, peak = self.peaks.get(pid) or ("other", 0)
            if kind == "other":  # a process seen as it starts may not show what it runs yet
                kind = kind_of(pid, self.root)
            self.peaks[pid] = (kind, max(peak, _status_kib(pid, "VmHWM:")))
            self.cpu_ticks[pid] = max(self.cpu_ticks.get(pid, 0), _cpu_ticks(pid))

    def mark(self) -> None:
        """The CPU time used so far (start-up), left out of :meth:`cpu_by_kind`."""
        self.sample()
        self.cpu_at_mark = dict(self.cpu_ticks)

    def by_kind(self) -> dict[str, float]:
        """The largest peak of each kind of process, MiB."""
        result: dict[str, float] = {}
        for kind, peak in self.peaks.values():
            result[kind] = max(result.get(kind, 0.0), peak / 1024)
        return result

    def cpu_by_kind(self) -> dict[str, float]:
        """CPU seconds used by all the processes of each kind since :meth:`mark`."""
        result: dict[str, float] = {}
        for pid, (kind, _) in self.peaks.items():
            used = self.cpu_ticks.get(pid, 0) - self.cpu_at_mark.get(pid, 0)
            result[kind] = result.get(kind, 0.0) + used / CLOCK_TICKS
        return result


def run_reader(reader: str, args: argparse.Namespace, url: str, path: str, work: Path) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", reader, "--url", url, "--path", path, "--work", str(work),
               "--cores", str(args.cores), "--driver-memory", args.driver_memory,
               f"--java-options={args.java_options}"]
    if args.key_groups_per_partition:
        command += ["--key-groups-per-partition", str(args.key_groups_per_partition)]
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    peaks = TreePeaks(child.pid)
    peaks.start()
    assert child.stdout is not None
    lines = []
    for line in child.stdout:
        if line.strip() == READING:
            peaks.mark()
        lines.append(line)
    child.wait()
    out = "".join(lines)
    peaks.done.set()
    peaks.join()
    if child.returncode != 0:
        raise SystemExit(f"bench_state_read: the {reader} reader exited {child.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "wall_s": time.monotonic() - started, "peaks": peaks.by_kind(), "cpu": peaks.cpu_by_kind()}


# ---------------------------------------------------------------------------- the table

def spread(values: list[float], fmt: str) -> str:
    if not values:
        return "n/a"
    return " / ".join(format(v, fmt) for v in (min(values), statistics.median(values), max(values)))


def print_tables(results: list[dict[str, Any]], sizes: list[int]) -> None:
    print("\n| size | format | reader | records | process | peak RSS MiB min / median / max "
          "| records/s min / median / max | read s (median) | CPU s of the read (median) | cores busy (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["size"], r["format"], r["reader"]), []).append(r)
    medians: dict[tuple[int, str, str, str], float] = {}
    for (size, fmt, reader), runs in groups.items():
        kinds = [k for k in KINDS if any(k in r["peaks"] for r in runs)]
        for kind in kinds:
            peaks = [r["peaks"][kind] for r in runs if kind in r["peaks"]]
            medians[(size, fmt, reader, kind)] = statistics.median(peaks)
            rates = [r["rows"] / r["seconds"] for r in runs]
            cpu = [r["cpu"].get(kind, 0.0) for r in runs]
            busy = [r["cpu"].get(kind, 0.0) / r["seconds"] for r in runs]
            print(f"| {size >> 20} MiB | {fmt} | {reader} | {runs[0]['rows']:,} | {kind} | {spread(peaks, '.0f')} "
                  f"| {spread(rates, ',.0f')} | {statistics.median(r['seconds'] for r in runs):.1f} "
                  f"| {statistics.median(cpu):.1f} | {statistics.median(busy):.2f} |")
    if len(sizes) < 2:
        return
    small, large = min(sizes), max(sizes)
    print(f"\nRatio of the median peak RSS, {large >> 20} MiB / {small >> 20} MiB (within 10%: 0.90-1.10)\n")
    print("| format | reader | process | ratio | within 10% |")
    print("|---|---|---|---|---|")
    for (size, fmt, reader, kind), value in medians.items():
        if size != large or (small, fmt, reader, kind) not in medians:
            continue
        ratio = value / medians[(small, fmt, reader, kind)]
        print(f"| {fmt} | {reader} | {kind} | {ratio:.2f} | {'yes' if 0.9 <= ratio <= 1.1 else 'NO'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["100MB", "1GB"])
    parser.add_argument("--formats", nargs="+", default=["incremental"], choices=["incremental", "canonical"])
    parser.add_argument("--readers", nargs="+", default=["python", "spark"], choices=["python", "spark"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--cores", type=int, default=2, help="Spark's local[N]")
    parser.add_argument("--key-groups-per-partition", type=int, default=None)
    parser.add_argument("--driver-memory", default="1g", help="Spark's driver memory (the JVM's heap at most)")
    parser.add_argument("--java-options", default=None,
                        help="the JVM options of Spark's session (default: tidemark.spark.state_source."
                             "READ_JAVA_OPTIONS; --java-options= for the JVM's defaults, G1)")
    parser.add_argument("--keep", action="store_true", help="keep the bench's directory (its state)")
    parser.add_argument("--child", choices=["python", "spark"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.java_options is None:
        from tidemark.spark.state_source import READ_JAVA_OPTIONS

        args.java_options = READ_JAVA_OPTIONS
    if args.child == "python":
        print(json.dumps(read_python(args.url, args.path, Path(args.work))))
        return
    if args.child == "spark":
        print(json.dumps(read_spark(args.url, args.path, args.cores, args.key_groups_per_partition,
                                    args.driver_memory, args.java_options)))
        return
    sizes = sorted(parse_size(s) for s in args.sizes)
    work = Path(tempfile.mkdtemp(prefix="tidemark-bench-state-read-"))
    url = (work / "checkpoints").as_uri()
    results: list[dict[str, Any]] = []
    try:
        checkpoint_id = 0
        for size in sizes:
            for fmt in args.formats:
                checkpoint_id += 1
                started = time.monotonic()
                path, keys, state_bytes = write_state(url, size, fmt, args.parallelism, checkpoint_id)
                progress(f"{size >> 20} MiB {fmt}: {keys:,} keys, {state_bytes / (1 << 20):.0f} MiB of state "
                         f"files, written in {time.monotonic() - started:.0f}s")
                for round_ in range(1, args.rounds + 1):
                    for reader in args.readers:
                        r = run_reader(reader, args, url, path, work)
                        if r["rows"] != keys:
                            raise SystemExit(f"bench_state_read: {reader} read {r['rows']} rows of {keys}")
                        results.append({**r, "size": size, "format": fmt, "reader": reader})
                        peaks = ", ".join(f"{k} {v:.0f}" for k, v in sorted(r["peaks"].items()))
                        progress(f"{size >> 20} MiB {fmt} round {round_} {reader}: {r['rows'] / r['seconds']:,.0f} "
                                 f"records/s, read {r['seconds']:.1f}s (process {r['wall_s']:.1f}s), "
                                 f"peak RSS MiB: {peaks}")
        print_tables(results, sizes)
    finally:
        if args.keep:
            progress(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
