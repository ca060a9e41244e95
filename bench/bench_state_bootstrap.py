"""Bootstrapping a savepoint of the count-per-URL job from a DataFrame of ``--keys`` URLs.

A local Spark session (``--cores``) builds a DataFrame of ``--keys`` rows ``(url, hits)`` and
:func:`tidemark.spark.state_bootstrap.bootstrap_dataframe` writes a savepoint of stage
``count_hits`` (state ``hits``, the job's descriptor) at ``--parallelism`` under max parallelism
128 with ``--backend``, one task per Spark partition. The savepoint is then read back whole by the
Python reader (one old task at a time) and every key's value compared. Printed: the write's and
the read's wall time, the peak RSS of the driver's Python process after the write and after the
read back (which restores one old task at a time), and of each executor's Python worker (what it
held while writing its task), the savepoint's size.

    PYTHONPATH=src .venv/bin/python bench/bench_state_bootstrap.py --keys 1000000 --backend heap
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--backend", default="heap", choices=["heap", "rocksdb"])
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from tidemark.spark.session import LocalSessionOptions, local_session
    from tidemark.spark.state_bootstrap import bootstrap_dataframe
    from tidemark.state import ValueStateDescriptor
    from tidemark.state_processor import StateReader
    from tidemark.storage import open_storage

    root = Path(tempfile.mkdtemp(prefix="tidemark-bench-bootstrap-"))
    url = root.as_uri()
    spark = local_session(LocalSessionOptions(cores=args.cores))
    df = spark.range(args.keys).select(F.concat(F.lit("/page/"), F.col("id").cast("string")).alias("url"),
                                       (F.col("id") % 1000).alias("hits"))
    started = time.monotonic()
    savepoint, tasks = bootstrap_dataframe(df, storage_url=url, job="access-log-counts", stage="count_hits",
                                           descriptor=ValueStateDescriptor("hits", default=0), key="url",
                                           value="hits", parallelism=args.parallelism, max_parallelism=128,
                                           backend=args.backend)
    write_s = time.monotonic() - started
    driver_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spark.stop()
    started = time.monotonic()
    reader = StateReader.open(open_storage(url), "access-log-counts", path=savepoint.path)
    wrong = rows = 0
    for row in reader.read("count_hits", "hits"):
        rows += 1
        wrong += int(row.value != int(row.key.rsplit("/", 1)[1]) % 1000)
    read_s = time.monotonic() - started
    print(json.dumps({
        "keys": args.keys, "backend": args.backend, "parallelism": args.parallelism,
        "write_s": round(write_s, 1), "read_back_s": round(read_s, 1), "rows_read_back": rows, "wrong": wrong,
        "savepoint_mib": round(savepoint.metadata.state_size_bytes / (1 << 20), 1),
        "driver_peak_rss_mib_after_write": round(driver_rss_kib / 1024, 1),
        "driver_peak_rss_mib_after_read_back": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tasks": [{"task": t.snapshot.task_id, "rows": t.rows, "seconds": round(t.seconds, 1),
                   "worker_peak_rss_mib": round(t.peak_rss_kib / 1024, 1)} for t in tasks],
    }, indent=2))
    if rows != args.keys or wrong:
        raise SystemExit(f"read back {rows} rows, {wrong} wrong")


if __name__ == "__main__":
    main()
