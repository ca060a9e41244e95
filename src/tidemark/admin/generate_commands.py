"""``tidemark generate access-log``: write example input (the access-log records of
:mod:`tidemark.examples.generator`) to an existing topic, with a progress line on stderr.

Event time goes on where the topic's records leave it: the generated records are numbered after
the records already in the topic (``--first`` sets the number), so a second run continues the
first in event time instead of starting it again (records behind the example job's watermark
would be late, and dropped)."""

from __future__ import annotations

import sys
import time
from typing import Optional

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tidemark.kafka.metadata import records_in
from tidemark.kafka.reachability import short_reason
from tidemark.exit_codes import EXIT_FAILED, EXIT_USAGE
from tidemark.admin.kafka_connection import fail, kafka_client

generate_app = typer.Typer(help="Write example input records to a topic.", no_args_is_help=True)
DEFAULT_RECORDS = 10_000


class _ProgressLine:
    """``written N/M records (R/s)`` on stderr: rewritten in place on a terminal, else a line
    every 5 s."""

    def __init__(self, total: int) -> None:
        self.total, self.started, self.printed = total, time.monotonic(), 0.0
        self.tty = sys.stderr.isatty()

    def __call__(self, count: int) -> None:
        elapsed = time.monotonic() - self.started
        if not self.tty and count < self.total and elapsed - self.printed < 5:
            return
        self.printed = elapsed
        line = f"written {count}/{self.total} records ({count / max(elapsed, 1e-3):.0f}/s)"
        print(f"\r{line}" if self.tty else line, end="" if self.tty and count < self.total else "\n",
              file=sys.stderr, flush=True)


def _total(records: Optional[int], rate: Optional[float], duration: Optional[float]) -> int:
    if duration is not None and rate is None:
        fail("generate access-log", "--duration needs --rate (records per second)", EXIT_USAGE)
    if duration is not None and records is not None:
        fail("generate access-log", "give --records or --rate with --duration, not both", EXIT_USAGE)
    if duration is not None and rate is not None:
        return max(int(rate * duration), 1)
    return records if records is not None else DEFAULT_RECORDS


@generate_app.command("access-log")
def access_log(
    topic: str = typer.Option(..., "--topic", help="The topic to write to; it must exist (`tidemark topics create`)."),
    records: Optional[int] = typer.Option(None, "--records", min=1,
                                          help=f"How many records (default {DEFAULT_RECORDS}, or rate x duration)."),
    rate: Optional[float] = typer.Option(None, "--rate", min=0.001, help="Records per second (default: as fast as "
                                         "the broker takes them)."),
    duration: Optional[float] = typer.Option(None, "--duration", min=0.001,
                                             help="Seconds to write for, at --rate."),
    seed: int = typer.Option(7, "--seed", help="The same seed and count give the same records."),
    first: Optional[int] = typer.Option(None, "--first", min=0,
                                        help="The number of the first record, which sets its event time "
                                             "(default: the number of records already in the topic)."),
    by_url: bool = typer.Option(False, "--by-url", help="Write each record into the partition of its URL's key "
                                "group (co-partitioned with the example jobs' key: their co_partitioned argument) "
                                "instead of round-robin."),
) -> None:
    """Write nginx-like JSON access-log records (the example jobs' input), spread over the topic's partitions."""
    from tidemark.examples import generator  # the example's codecs: only when generating

    total = _total(records, rate, duration)
    _, client = kafka_client("generate access-log")
    try:
        meta = AdminClient(client).list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException as exc:
        fail("generate access-log", f"{topic}: {short_reason(exc)}", EXIT_FAILED)
    if meta is None or meta.error is not None or not meta.partitions:
        fail("generate access-log", f"unknown topic {topic!r}; create it first: tidemark topics create {topic} "
             "--partitions 4", EXIT_USAGE)
    try:
        if first is None:
            first = records_in(client, topic, sorted(meta.partitions))
        started = time.monotonic()
        partitions = len(meta.partitions)
        written = generator.produce(client, topic, generator.generate(total, seed=seed, first=first),
                                    partitions=partitions, rate_per_s=rate, progress=_ProgressLine(total),
                                    partition_of=generator.by_url(partitions) if by_url else None)
    except KafkaException as exc:
        fail("generate access-log", f"{topic}: {short_reason(exc)}", EXIT_FAILED)
    except RuntimeError as exc:  # records still undelivered after the final flush
        fail("generate access-log", str(exc), EXIT_FAILED)
    elapsed = time.monotonic() - started
    typer.echo(f"wrote {written} access-log records to {topic} ({partitions} partitions{', by URL' if by_url else ''}) in "
               f"{elapsed:.1f}s" + (f", event time after record {first}" if first else ""))


def install(app: typer.Typer) -> None:
    app.add_typer(generate_app, name="generate")
