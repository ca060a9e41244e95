"""The seed's access-log example: count hits per URL from nginx-like JSON records.

Input records (one JSON document per Kafka record, see :mod:`tidemark.examples.generator`)::

    {"ts": 1700000000123, "ip": "10.0.0.7", "method": "GET", "url": "/cart", "status": 200, "bytes": 512}

* :func:`url_counts` - single stage: key by URL, keep a ValueState counter, emit
  ``{"url", "hits"}`` on every record (the output of one URL is the sequence 1, 2, ..., n).
* :func:`top_urls` - an event-time tumbling window of one minute over two stages connected by a
  Kafka topic. Event time is the record's ``ts``; watermarks allow ``max_out_of_orderness_ms``
  of disorder and an input partition idle for ``idle_timeout_ms`` stops holding them back.
  ``minute_counts`` keys by URL and counts hits per (URL, minute) in a MapState, emitting
  ``{"minute", "url", "hits"}`` on every record, and drops a minute's count with an event-time
  timer when the minute is over. ``top_urls`` keys by minute, keeps the newest count per URL in a
  MapState and registers one event-time timer at the minute's last millisecond; when the
  watermark passes it, ``on_timer`` emits the minute's final top URLs once,
  ``{"minute", "top": [[url, hits], ...]}``, and clears the window. A minute is final when the
  largest event time read reaches its end plus the out-of-orderness bound
  (:func:`closed_minutes`). Records behind the watermark are dropped and counted.
* :func:`ip_sessions` - processing-time timers: keys by client IP, counts requests, and after
  ``timeout_ms`` of wall-clock time without a request from that IP emits
  ``{"ip", "requests", "first_ts", "last_ts"}`` (the session closed) and forgets it; the timer
  fires without any new input.

Both take ``on_error`` (the stages' error policy: ``dead-letter``, ``skip`` or ``fail``).
``top_urls(fail_on_url=...)`` makes the first stage's function raise on records of that URL,
before it touches state: a stand-in for a bug in user code, used by the poison-record tests.
"""

from __future__ import annotations

import functools
from typing import Any

from tidemark.api import (
    ErrorPolicy,
    EventTime,
    Input,
    JobSpec,
    KeyedProcessFunction,
    LateRecords,
    SparkStep,
    Stage,
    StateBackendKind,
)
from tidemark.state import MapStateDescriptor, ValueStateDescriptor
from tidemark.types import CheckpointingMode, JobId

TOP_N = 3
MINUTE_MS = 60_000
OUT_OF_ORDERNESS_MS = 1_000  # top_urls' defaults
IDLE_TIMEOUT_MS = 3_000
SESSION_TIMEOUT_MS = 5_000  # ip_sessions' default


def event_ts(record: dict[str, Any]) -> int:
    """The access-log record's event time."""
    return int(record["ts"])


def minute_of(ts: int) -> int:
    return ts // MINUTE_MS * MINUTE_MS


def window_end(minute: int) -> int:
    """The last millisecond of the minute starting at ``minute`` (Flink: ``maxTimestamp``)."""
    return minute + MINUTE_MS - 1


def closed_minutes(largest_ts: int, max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS) -> int:
    """The end (exclusive) of the minutes ``top_urls`` closes once every input partition went
    idle after the largest event time ``largest_ts``: the watermark is then
    ``largest_ts - max_out_of_orderness_ms - 1``, and a minute closes when it reaches the
    minute's last millisecond."""
    watermark = largest_ts - max_out_of_orderness_ms - 1
    return minute_of(watermark + 1)


def text_field(name: str) -> Any:
    """A key selector: the record's non-empty string field ``name`` (a record without one is malformed)."""
    def key(record: dict[str, Any]) -> str:
        value = record[name]
        if not isinstance(value, str) or not value:
            raise ValueError(f"record has no {name}: {record!r}")
        return value
    return key


RECORD_SCHEMA = "ts BIGINT, ip STRING, method STRING, url STRING, status INT, bytes BIGINT"
"""An access-log record as a Spark schema (``from_json``)."""

PARSE_RECORD = SparkStep(
    f"SELECT topic, partition, offset, timestamp, r.* FROM "
    f"(SELECT topic, partition, offset, timestamp, from_json(CAST(value AS STRING), '{RECORD_SCHEMA}') AS r "
    f"FROM input)",
    required=("url", "ts"))
"""A Spark step that parses each record with its schema (Spark decodes, not Python): each row is
the record's fields; a record it cannot parse (no url or ts) is dead-lettered with its bytes (looked
up in the batch for such rows only: the rows leave the bytes behind, which Spark need not convert)."""


def _spark_step(parse: bool) -> SparkStep | None:
    return PARSE_RECORD if parse else None


_url = text_field("url")
_ip = text_field("ip")


class CountHits(KeyedProcessFunction):
    def open(self, ctx: Any) -> None:
        self.hits = ctx.get_state(ValueStateDescriptor("hits", default=0))

    def process(self, value: Any, ctx: Any) -> None:
        hits = self.hits.value() + 1
        self.hits.update(hits)
        ctx.emit(ctx.key, {"url": ctx.key, "hits": hits})


class CountPerMinute(KeyedProcessFunction):
    """Hits of the current URL per minute; a minute's count is dropped once the minute is over."""

    def __init__(self, fail_on_url: str | None = None) -> None:
        self.fail_on_url = fail_on_url

    def open(self, ctx: Any) -> None:
        self.per_minute = ctx.get_state(MapStateDescriptor("hits_per_minute"))

    def process(self, value: Any, ctx: Any) -> None:
        if self.fail_on_url is not None and ctx.key == self.fail_on_url:
            raise RuntimeError(f"CountPerMinute was told to fail on {ctx.key!r}")
        minute = minute_of(ctx.timestamp_ms)
        hits = (self.per_minute.get(minute) or 0) + 1
        self.per_minute.put(minute, hits)
        ctx.timer_service().register_event_time_timer(window_end(minute))  # the same timer for the whole minute
        ctx.emit(ctx.key, {"minute": minute, "url": ctx.key, "hits": hits})  # the next stage re-keys by minute

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        self.per_minute.remove(minute_of(timestamp_ms))


class TopUrls(KeyedProcessFunction):
    """A one-minute tumbling window (the key is the minute): the largest count per URL, emitted
    once when the watermark passes the minute's end."""

    def open(self, ctx: Any) -> None:
        self.counts = ctx.get_state(MapStateDescriptor("url_hits"))

    def process(self, value: Any, ctx: Any) -> None:
        url, hits = value["url"], int(value["hits"])
        if hits > (self.counts.get(url) or 0):
            self.counts.put(url, hits)
        ctx.timer_service().register_event_time_timer(window_end(ctx.key))

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        ctx.emit(ctx.key, {"minute": ctx.key, "top": top_of(self.counts.items())})
        self.counts.clear()


class IpSession(KeyedProcessFunction):
    """Requests per client IP until it is quiet for ``timeout_ms`` of processing time."""

    def __init__(self, timeout_ms: int = SESSION_TIMEOUT_MS) -> None:
        self.timeout_ms = timeout_ms

    def open(self, ctx: Any) -> None:
        self.session = ctx.get_state(ValueStateDescriptor("session"))  # [requests, first_ts, last_ts, timer]

    def process(self, value: Any, ctx: Any) -> None:
        timers = ctx.timer_service()
        session = self.session.value()
        if session is None:
            session = [0, ctx.timestamp_ms, ctx.timestamp_ms, None]
        elif session[3] is not None:
            timers.delete_processing_time_timer(session[3])
        deadline = timers.current_processing_time() + self.timeout_ms
        timers.register_processing_time_timer(deadline)
        self.session.update([session[0] + 1, min(session[1], ctx.timestamp_ms), max(session[2], ctx.timestamp_ms),
                             deadline])

    def on_timer(self, timestamp_ms: int, ctx: Any) -> None:
        requests, first_ts, last_ts, _ = self.session.value()
        ctx.emit(ctx.key, {"ip": ctx.key, "requests": requests, "first_ts": first_ts, "last_ts": last_ts})
        self.session.clear()


def top_of(counts: Any, n: int = TOP_N) -> list[list[Any]]:
    """The ``n`` URLs with most hits, ties by URL."""
    return [[url, hits] for url, hits in sorted(counts, key=lambda item: (-item[1], item[0]))[:n]]


def url_counts(job_id: str = "access-log-counts", input_topic: str = "access-log",
               output_topic: str = "url-counts", parallelism: int = 2, mode: str = "EXACTLY_ONCE",
               state_backend: str = "heap", changelog: bool = False, on_error: str = "dead-letter",
               workers: int = 1, co_partitioned: bool = False, spark_step: bool = False) -> JobSpec:
    """``co_partitioned``: the input is partitioned by URL (``generator.by_url``): with several
    workers each reads the partitions of its URLs, no exchange; ``spark_step``: Spark parses the
    records (:data:`PARSE_RECORD`), keyed by the ``url`` column."""
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("count_hits", (Input(input_topic, co_partitioned=co_partitioned),), "url" if spark_step else _url,
                      CountHits, output_topic, on_error=ErrorPolicy(on_error), spark_step=_spark_step(spark_step)),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)


def top_urls(job_id: str = "access-log-top-urls", input_topic: str = "access-log",
             channel_topic: str = "url-minute-counts", output_topic: str = "top-urls",
             parallelism: int = 2, mode: str = "EXACTLY_ONCE", state_backend: str = "heap",
             changelog: bool = False, top_urls_batch_records: int = 20_000, on_error: str = "dead-letter",
             fail_on_url: str | None = None, workers: int = 1, top_urls_workers: int | None = None,
             max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS, idle_timeout_ms: int = IDLE_TIMEOUT_MS,
             late_records: str = "drop", late_output: str | None = None, co_partitioned: bool = False,
             spark_step: bool = False) -> JobSpec:
    """``top_urls_batch_records`` caps the second stage's micro-batches (a slower consumer);
    ``workers``: worker processes per stage, ``top_urls_workers`` the second stage's if different;
    ``late_records`` (``drop``, ``side-output`` to ``late_output``, or ``process``): the first
    stage's records behind the watermark; ``co_partitioned``: the input is partitioned by URL
    (``generator.by_url``), read by the first stage's workers without an exchange; ``spark_step``:
    Spark parses the records (:data:`PARSE_RECORD`)."""
    policy = ErrorPolicy(on_error)
    event_time = EventTime(timestamp=event_ts, max_out_of_orderness_ms=max_out_of_orderness_ms,
                           idle_timeout_ms=idle_timeout_ms)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(
            Stage("minute_counts", (Input(input_topic, co_partitioned=co_partitioned),), _url,
                  functools.partial(CountPerMinute, fail_on_url),
                  channel_topic, on_error=policy, event_time=event_time, late_records=LateRecords(late_records),
                  late_output=late_output, spark_step=_spark_step(spark_step)),
            Stage("top_urls", (channel_topic,), lambda v: int(v["minute"]), TopUrls, output_topic,
                  max_records_per_batch=top_urls_batch_records, on_error=policy, workers=top_urls_workers),
        ),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)


def ip_sessions(job_id: str = "access-log-ip-sessions", input_topic: str = "access-log",
                output_topic: str = "ip-sessions", parallelism: int = 2, mode: str = "EXACTLY_ONCE",
                state_backend: str = "heap", timeout_ms: int = SESSION_TIMEOUT_MS, on_error: str = "dead-letter",
                workers: int = 1) -> JobSpec:
    """``timeout_ms``: wall-clock time without a request after which an IP's session closes."""
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("ip_sessions", (input_topic,), _ip, functools.partial(IpSession, timeout_ms), output_topic,
                      on_error=ErrorPolicy(on_error)),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend))
