"""Quix Streams doing Tidemark's ``url_counts`` job: count per URL, ``{url, hits}`` per record.

The other side of ``bench/bench_vs_quix.py``, which runs this file with the Python of its own
benchmark-only environment (``.venv-bench-quix/``, ``bench/requirements-quix.txt``); it never runs
in the project's environment and imports nothing from Tidemark. Reads the JSON access-log records
of ``--input`` from the earliest offset with a fresh ``--group``, re-keys them by URL
(``group_by("url")``: the input records have no key; with ``--keyed`` the input is already keyed by
URL, each URL in one partition, and is counted as it is: Quix's best case, no repartition topic),
keeps the count per URL in Quix's default
state store (RocksDB, under ``--state-dir``) and writes ``{"url", "hits"}`` for every record to
``--output``, with ``processing_guarantee="exactly-once"``. Runs until SIGTERM (the benchmark sends
it once every result is committed); Quix commits its current checkpoint on the way out.

    .venv-bench-quix/bin/python bench/quix_count_per_url.py --bootstrap localhost:9092 \\
        --input access-log --output quix-url-counts --group quix-1 --state-dir /tmp/quix-state
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from quixstreams import Application, State
from quixstreams.models.topics import TopicConfig


def count_hits(value: dict[str, Any], state: State) -> dict[str, Any]:
    hits = state.get("hits", 0) + 1
    state.set("hits", hits)
    return {"url": value["url"], "hits": hits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--group", required=True, help="consumer group, unique per run")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--partitions", type=int, default=4, help="of the output topic")
    parser.add_argument("--commit-interval-s", type=float, default=2.0)
    parser.add_argument("--keyed", action="store_true", help="the input is keyed by URL: no group_by")
    options = parser.parse_args()
    app = Application(broker_address=options.bootstrap, consumer_group=options.group,
                      auto_offset_reset="earliest", processing_guarantee="exactly-once",
                      commit_interval=options.commit_interval_s, state_dir=options.state_dir,
                      loglevel=logging.WARNING)
    source = app.topic(options.input, value_deserializer="json", key_deserializer="str" if options.keyed else "bytes")
    sink = app.topic(options.output, value_serializer="json", key_serializer="str",
                     config=TopicConfig(num_partitions=options.partitions, replication_factor=1))
    records = app.dataframe(source)
    counts = (records if options.keyed else records.group_by("url")).apply(count_hits, stateful=True)
    counts.to_topic(sink)
    print("quix: running", flush=True)
    app.run()


if __name__ == "__main__":
    main()
