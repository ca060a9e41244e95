"""Quix Streams doing the tumbling count of ``bench/bench_windows.py``: hits per URL per minute of
event time, ``{"url", "start", "end", "hits"}`` once per window, when it closes.

The other side of ``bench/bench_windows.py``, which runs this file with the Python of its own
benchmark-only environment (``.venv-bench-quix/``, ``bench/requirements-quix.txt``); it never runs
in the project's environment and imports nothing from Tidemark. Reads the JSON access-log records
of ``--input`` from the earliest offset with a fresh ``--group``, with the record's ``ts`` as its
timestamp (a timestamp extractor), re-keys them by URL (``group_by("url")``: the input records have
no key), counts them in tumbling windows of ``--window-ms`` with a grace of ``--grace-ms``
(``tumbling_window(...).count().final()``: the counts live in Quix's default state store, RocksDB,
under ``--state-dir``) and writes each window's count once, when it closes, to ``--output``, with
``processing_guarantee="exactly-once"``.

Quix closes a window of a key when a record of that key (the default closing strategy, ``"key"``)
has a timestamp at or past the window's end plus the grace: there is no idleness, so each URL's
windows ending less than the grace before its newest record stay open. A record whose window is
already closed is dropped; this app counts them (``on_late``, without a log line per record) and
prints ``quix: late records dropped N (the latest by M ms)`` when it stops. Runs until SIGTERM (the benchmark sends it
once every expected window is committed); Quix commits its current checkpoint on the way out.

    .venv-bench-quix/bin/python bench/quix_tumbling_count_per_url.py --bootstrap localhost:9092 \\
        --input access-log --output quix-windows --group quix-1 --state-dir /tmp/quix-state
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from quixstreams import Application
from quixstreams.models.topics import TopicConfig

late = {"records": 0, "most_ms": 0}


def event_time(value: Any, headers: Any, timestamp: float, timestamp_type: Any) -> int:
    """The record's event time: its ``ts`` field, as Tidemark's job reads it."""
    return int(value["ts"])


def count_late(value: Any, key: Any, timestamp_ms: int, late_by_ms: int, start: int, end: int, name: str,
               topic: str, partition: int, offset: int) -> bool:
    late["records"] += 1
    late["most_ms"] = max(late["most_ms"], late_by_ms)
    return False  # no log line per late record


def window_row(value: dict[str, Any], key: Any, timestamp: int, headers: Any) -> dict[str, Any]:
    return {"url": key, "start": value["start"], "end": value["end"], "hits": value["value"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True, help="consumer group, unique per run")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--partitions", type=int, default=4, help="of the output topic")
    parser.add_argument("--commit-interval-s", type=float, default=2.0)
    parser.add_argument("--window-ms", type=int, default=60_000)
    parser.add_argument("--grace-ms", type=int, default=1_000)
    options = parser.parse_args()
    app = Application(broker_address=options.bootstrap, consumer_group=options.group,
                      auto_offset_reset="earliest", processing_guarantee="exactly-once",
                      commit_interval=options.commit_interval_s, state_dir=options.state_dir,
                      loglevel=logging.WARNING)
    source = app.topic(options.input, value_deserializer="json", timestamp_extractor=event_time)
    sink = app.topic(options.output, value_serializer="json", key_serializer="str",
                     config=TopicConfig(num_partitions=options.partitions, replication_factor=1))
    windows = (app.dataframe(source).group_by("url")
               .tumbling_window(duration_ms=options.window_ms, grace_ms=options.grace_ms, on_late=count_late)
               .count().final())
    windows.apply(window_row, metadata=True).to_topic(sink)
    print("quix: running", flush=True)
    app.run()
    print(f"quix: late records dropped {late['records']} (the latest by {late['most_ms']} ms)", flush=True)


if __name__ == "__main__":
    main()
