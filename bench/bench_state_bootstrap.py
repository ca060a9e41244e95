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
import contextlib
import json
import resource
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

JOB = "tidemark.examples.access_log:url_counts"


def table_value(url: str) -> int:
    """The bootstrapped count of ``url``: ``1000 * (i + 1)`` for the generator's URL ``i``, else the
    number in ``/page/<n>`` modulo 1000."""
    from tidemark.examples.generator import URLS

    return 1000 * (URLS.index(url) + 1) if url in URLS else int(url.rsplit("/", 1)[1]) % 1000


def _largest_rss_mib(marker: str) -> float:
    """The largest resident set of the processes (not this one) whose command line or environment
    mentions ``marker`` (the pipeline's home: the job's supervisor and workers)."""
    import os

    largest = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() not in (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes():
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    largest = max(largest, int(line.split()[1]))
        except OSError:
            continue
    return largest / 1024


def run_job(pipe: Any, bootstrap: str, savepoint_path: str, records: int) -> dict[str, Any]:
    """Start the count-per-URL job from the savepoint and check its output (see the module docstring)."""
    import threading

    from tidemark.examples.generator import URLS, expected_url_counts, generate, produce
    from tidemark.examples.verify import read_committed, verify_example

    run = uuid.uuid4().hex[:6]
    args = {"job_id": "access-log-counts", "input_topic": f"bench-in-{run}", "output_topic": f"bench-out-{run}"}
    pipe.create_topic(args["input_topic"], 4)
    sent = list(generate(records))
    produce(bootstrap, args["input_topic"], sent, 4, chunk=10_000)
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], _largest_rss_mib(str(pipe.home)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    job = pipe.start_job(JOB, args, from_savepoint=savepoint_path)
    first = read_committed(bootstrap, args["output_topic"], expect=1, timeout_s=600, settle_s=0)
    first_s = time.monotonic() - started
    output = read_committed(bootstrap, args["output_topic"], expect=len(sent), timeout_s=600)
    all_s = time.monotonic() - started
    done.set()
    sampler.join()
    job.stop()
    start = {url: 1000 * (i + 1) for i, url in enumerate(URLS)}
    expected = {(url, start[url] + i): {"url": url, "hits": start[url] + i}
                for url, n in expected_url_counts(sent).items() for i in range(1, n + 1)}
    verdict = verify_example("url_counts", output, expected)
    return {"records": len(sent), "first_output_s": round(first_s, 1) if first else None,
            "all_output_s": round(all_s, 1), "largest_job_process_rss_mib": round(peak[0], 1), "exactly_once": verdict.exactly_once, "output": verdict.records,
            "continues_from_table": verdict.exactly_once and verdict.records == len(sent)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--backend", default="heap", choices=["heap", "rocksdb"])
    parser.add_argument("--start-job", action="store_true", help="start the count-per-URL job from the savepoint")
    parser.add_argument("--records", type=int, default=2000, help="input records of the job (--start-job)")
    parser.add_argument("--transform", action="store_true",
                        help="derive a savepoint with every count plus one (in this process) and read that back")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        bench(args, stack)


def bench(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    if args.start_job and args.transform:
        raise SystemExit("--start-job checks the table's counts: leave out --transform")
    from pyspark.sql import functions as F

    from tidemark.spark.session import SessionOptions, spark_session
    from tidemark.spark.state_bootstrap import bootstrap_dataframe
    from tidemark.state import ValueStateDescriptor
    from tidemark.state_processor import StateReader
    from tidemark.storage import open_storage

    home = Path(tempfile.mkdtemp(prefix="tidemark-bench-bootstrap-"))
    pipe = bootstrap = None
    if args.start_job:
        from tidemark.broker.embedded import kafka_or_embedded
        from tidemark.examples.generator import URLS
        from tidemark.local.pipeline import LocalPipeline

        bootstrap, _ = stack.enter_context(kafka_or_embedded(home / "broker"))
        pipe = stack.enter_context(LocalPipeline(home / "pipeline", bootstrap, topic_prefix="bench-bootstrap"))
        root = (home / "pipeline" / "checkpoints").resolve()
    else:
        root = home / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    url = root.as_uri()
    spark = spark_session(SessionOptions(master=f"local[{args.cores}]"))
    df = spark.range(args.keys).select(F.concat(F.lit("/page/"), F.col("id").cast("string")).alias("url"),
                                       (F.col("id") % 1000).alias("hits"))
    if args.start_job:  # the generator's URLs instead of the first 60 pages
        generated = spark.createDataFrame([(u, 1000 * (i + 1)) for i, u in enumerate(URLS)], "url STRING, hits BIGINT")
        df = generated.unionByName(df.where(F.col("id") >= len(URLS)).select("url", "hits"))
    started = time.monotonic()
    savepoint, tasks = bootstrap_dataframe(df, storage_url=url, job="access-log-counts", stage="count_hits",
                                           descriptor=ValueStateDescriptor("hits", default=0), key="url",
                                           value="hits", parallelism=args.parallelism, max_parallelism=128,
                                           backend=args.backend)
    write_s = time.monotonic() - started
    driver_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    spark.stop()
    transformed = None
    added = 0
    if args.transform:
        from tidemark.state_processor import MapState, open_source, transform_savepoint

        started = time.monotonic()
        savepoint = transform_savepoint(open_source(open_storage(url), "access-log-counts", path=savepoint.path),
                                        [MapState("count_hits", "hits", lambda url, hits: hits + 1)],
                                        parallelism=args.parallelism)
        transformed = {"seconds": round(time.monotonic() - started, 1),
                       "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
        added = 1
    started = time.monotonic()
    reader = StateReader.open(open_storage(url), "access-log-counts", path=savepoint.path)
    wrong = rows = 0
    for row in reader.read("count_hits", "hits"):
        rows += 1
        wrong += int(row.value != table_value(row.key) + added)
    read_s = time.monotonic() - started
    job = run_job(pipe, bootstrap, savepoint.path, args.records) if pipe is not None else None
    print(json.dumps({
        "keys": args.keys, "backend": args.backend, "parallelism": args.parallelism,
        "write_s": round(write_s, 1), "read_back_s": round(read_s, 1), "rows_read_back": rows, "wrong": wrong,
        "savepoint_mib": round(savepoint.metadata.state_size_bytes / (1 << 20), 1),
        "driver_peak_rss_mib_after_write": round(driver_rss_kib / 1024, 1),
        "driver_peak_rss_mib_after_read_back": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "tasks": [{"task": t.snapshot.task_id, "rows": t.rows, "seconds": round(t.seconds, 1),
                   "worker_peak_rss_mib": round(t.peak_rss_kib / 1024, 1)} for t in tasks],
        "transform": transformed,
        "job": job,
    }, indent=2))
    if rows != args.keys or wrong:
        raise SystemExit(f"read back {rows} rows, {wrong} wrong")
    if job is not None and not job["continues_from_table"]:
        raise SystemExit("the job's output does not continue from the table")


if __name__ == "__main__":
    main()
