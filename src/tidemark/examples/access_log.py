"""The seed's access-log example: count hits per URL from nginx-like JSON records.

Input records (one JSON document per Kafka record, see :mod:`tidemark.examples.generator`)::

    {"ts": 1700000000123, "ip": "10.0.0.7", "method": "GET", "url": "/cart", "status": 200, "bytes": 512}

* :func:`url_counts` - single stage: key by URL, keep a ValueState counter, emit
  ``{"url", "hits"}`` on every record (the output of one URL is the sequence 1, 2, ..., n).
* :func:`top_urls` - two stages connected by a Kafka topic: ``minute_counts`` keys by URL and
  counts hits per (URL, minute) in a MapState, emitting ``{"minute", "url", "hits"}``;
  ``top_urls`` keys by minute, keeps the newest count per URL in a MapState and a ValueState
  sequence number, and emits ``{"minute", "seq", "top": [[url, hits], ...]}`` on every update.
  The last record of a minute (``seq`` = the minute's number of input records) holds its final
  top URLs.

Both take ``on_error`` (the stages' error policy: ``dead-letter``, ``skip`` or ``fail``).
``top_urls(fail_on_url=...)`` makes the first stage's function raise on records of that URL,
before it touches state: a stand-in for a bug in user code, used by the poison-record tests.
"""

from __future__ import annotations

import functools
from typing import Any

from tidemark.runtime.api import ErrorPolicy, JobSpec, KeyedProcessFunction, Stage, StateBackendKind
from tidemark.state import MapStateDescriptor, ValueStateDescriptor
from tidemark.types import CheckpointingMode, JobId

TOP_N = 3
MINUTE_MS = 60_000


def _url(record: dict[str, Any]) -> str:
    url = record["url"]
    if not isinstance(url, str) or not url:
        raise ValueError(f"record has no url: {record!r}")
    return url


class CountHits(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        hits = self.hits.value() + 1
        self.hits.update(hits)
        ctx.emit(ctx.key, {"url": ctx.key, "hits": hits})


class CountPerMinute(KeyedProcessFunction):
    def __init__(self, fail_on_url: str | None = None) -> None:
        self.fail_on_url = fail_on_url

    def open(self, ctx: Any) -> None:
        self.per_minute = ctx.get_state(MapStateDescriptor("hits_per_minute"))

    def process(self, value: Any, ctx: Any) -> None:
        if self.fail_on_url is not None and ctx.key == self.fail_on_url:
            raise RuntimeError(f"CountPerMinute was told to fail on {ctx.key!r}")
        minute = int(value["ts"]) // MINUTE_MS * MINUTE_MS
        hits = (self.per_minute.get(minute) or 0) + 1
        self.per_minute.put(minute, hits)
        ctx.emit(ctx.key, {"minute": minute, "url": ctx.key, "hits": hits})  # the next stage re-keys by minute


class TopUrls(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.counts = ctx.get_state(MapStateDescriptor("url_hits"))
        self.seq = ctx.get_state(ValueStateDescriptor("seq", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        url, hits = value["url"], int(value["hits"])
        if hits > (self.counts.get(url) or 0):
            self.counts.put(url, hits)
        seq = self.seq.value() + 1
        self.seq.update(seq)
        ctx.emit(ctx.key, {"minute": ctx.key, "seq": seq, "top": top_of(self.counts.items())})


def top_of(counts: Any, n: int = TOP_N) -> list[list[Any]]:
    """The ``n`` URLs with most hits, ties by URL."""
    return [[url, hits] for url, hits in sorted(counts, key=lambda item: (-item[1], item[0]))[:n]]


def url_counts(job_id: str = "access-log-counts", input_topic: str = "access-log",
               output_topic: str = "url-counts", parallelism: int = 2, mode: str = "EXACTLY_ONCE",
               state_backend: str = "heap", changelog: bool = False, on_error: str = "dead-letter",
               workers: int = 1) -> JobSpec:
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("count_hits", (input_topic,), _url, CountHits, output_topic,
                      on_error=ErrorPolicy(on_error)),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)


def top_urls(job_id: str = "access-log-top-urls", input_topic: str = "access-log",
             channel_topic: str = "url-minute-counts", output_topic: str = "top-urls",
             parallelism: int = 2, mode: str = "EXACTLY_ONCE", state_backend: str = "heap",
             changelog: bool = False, top_urls_batch_records: int = 20_000, on_error: str = "dead-letter",
             fail_on_url: str | None = None, workers: int = 1, top_urls_workers: int | None = None) -> JobSpec:
    """``top_urls_batch_records`` caps the second stage's micro-batches (a slower consumer);
    ``workers``: worker processes per stage, ``top_urls_workers`` the second stage's if different."""
    policy = ErrorPolicy(on_error)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(
            Stage("minute_counts", (input_topic,), _url, functools.partial(CountPerMinute, fail_on_url),
                  channel_topic, on_error=policy),
            Stage("top_urls", (channel_topic,), lambda v: int(v["minute"]), TopUrls, output_topic,
                  max_records_per_batch=top_urls_batch_records, on_error=policy, workers=top_urls_workers),
        ),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)
