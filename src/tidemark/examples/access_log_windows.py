"""The access-log examples on the window API (:mod:`tidemark.windows`), over the records of
:mod:`tidemark.examples.generator` (event time: the record's ``ts``).

* :func:`sessions` - sessionization: per client IP, a session window with a gap of
  ``gap_ms`` (default 30 minutes): ``{"ip", "start", "end", "requests", "distinct_urls"}`` once
  per session, when the watermark passes its end (``end`` is the last request plus the gap). An
  incremental aggregate (:class:`SessionStats`) keeps one accumulator per session, merged when a
  request bridges two sessions; :class:`SessionRow` adds the window's bounds.
* :func:`sliding_url_counts` - hits per URL in windows of ``size_ms`` (default 5 minutes)
  starting every ``slide_ms`` (default 1 minute): ``{"url", "start", "end", "hits"}`` per window.
  With ``allowed_lateness_ms`` a window takes late records that long after its end, each firing
  it again with the updated count; later ones go where ``late_records`` says (``drop``, or
  ``side-output`` to ``late_output``).
* :func:`windowed_top_urls` - :func:`tidemark.examples.access_log.top_urls` written on windows,
  same output: ``minute_counts`` counts hits per URL in one-minute tumbling windows and emits each
  (URL, minute) count once, when the minute closes; ``top_urls`` gathers a minute's counts in a
  one-minute tumbling window keyed by minute (each count arrives with the minute's last
  millisecond as its event time) and emits ``{"minute", "top"}`` once. Checked by the same
  verification as ``top_urls`` (:func:`tidemark.examples.verify.verify_top_urls`).
"""

from __future__ import annotations

from typing import Any

from tidemark.api import ErrorPolicy, EventTime, JobSpec, LateRecords, Stage, StateBackendKind
from tidemark.examples.access_log import (
    IDLE_TIMEOUT_MS,
    MINUTE_MS,
    OUT_OF_ORDERNESS_MS,
    event_ts,
    text_field,
    top_of,
)
from tidemark.types import CheckpointingMode, JobId
from tidemark.windows import ProcessWindowFunction, SessionWindows, SlidingWindows, TumblingWindows, Windowed

SESSION_GAP_MS = 30 * MINUTE_MS


class Count:
    """An aggregate function counting records."""

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, a: int, b: int) -> int:
        return a + b


class SessionStats:
    """A session's requests and distinct URLs; merging two sessions adds them up."""

    def create_accumulator(self) -> list[Any]:
        return [0, []]  # requests, sorted distinct URLs

    def add(self, value: dict[str, Any], accumulator: list[Any]) -> list[Any]:
        requests, urls = accumulator
        url = value["url"]
        return [requests + 1, urls if url in urls else sorted([*urls, url])]

    def get_result(self, accumulator: list[Any]) -> dict[str, int]:
        return {"requests": accumulator[0], "distinct_urls": len(accumulator[1])}

    def merge(self, a: list[Any], b: list[Any]) -> list[Any]:
        return [a[0] + b[0], sorted(set(a[1]) | set(b[1]))]


class SessionRow(ProcessWindowFunction):
    def process(self, key: Any, elements: list[Any], ctx: Any) -> None:
        [stats] = elements
        ctx.emit(key, {"ip": key, "start": ctx.window.start, "end": ctx.window.end, **stats})


class UrlWindowRow(ProcessWindowFunction):
    def process(self, key: Any, elements: list[Any], ctx: Any) -> None:
        ctx.emit(key, {"url": key, "start": ctx.window.start, "end": ctx.window.end, "hits": elements[0]})


class MinuteCount(ProcessWindowFunction):
    def process(self, key: Any, elements: list[Any], ctx: Any) -> None:
        ctx.emit(key, {"minute": ctx.window.start, "url": key, "hits": elements[0]})


class MinuteTop(ProcessWindowFunction):
    def process(self, key: Any, elements: list[Any], ctx: Any) -> None:
        ctx.emit(key, {"minute": key, "top": top_of((e["url"], int(e["hits"])) for e in elements)})


def _event_time(max_out_of_orderness_ms: int, idle_timeout_ms: int) -> EventTime:
    return EventTime(timestamp=event_ts, max_out_of_orderness_ms=max_out_of_orderness_ms,
                     idle_timeout_ms=idle_timeout_ms)


def sessions(job_id: str = "access-log-sessions", input_topic: str = "access-log", output_topic: str = "sessions",
             parallelism: int = 2, mode: str = "EXACTLY_ONCE", state_backend: str = "heap", changelog: bool = False,
             gap_ms: int = SESSION_GAP_MS, allowed_lateness_ms: int = 0, on_error: str = "dead-letter",
             max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS, idle_timeout_ms: int = IDLE_TIMEOUT_MS,
             late_records: str = "drop", late_output: str | None = None, workers: int = 1) -> JobSpec:
    windowed = Windowed(SessionWindows(gap_ms=gap_ms), aggregate=SessionStats(), process=SessionRow,
                        allowed_lateness_ms=allowed_lateness_ms)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("sessions", (input_topic,), text_field("ip"), windowed, output_topic,
                      on_error=ErrorPolicy(on_error), event_time=_event_time(max_out_of_orderness_ms, idle_timeout_ms),
                      late_records=LateRecords(late_records), late_output=late_output),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)


def sliding_url_counts(job_id: str = "access-log-sliding-counts", input_topic: str = "access-log",
                       output_topic: str = "sliding-url-counts", parallelism: int = 2, mode: str = "EXACTLY_ONCE",
                       state_backend: str = "heap", changelog: bool = False, size_ms: int = 5 * MINUTE_MS,
                       slide_ms: int = MINUTE_MS, allowed_lateness_ms: int = 0, on_error: str = "dead-letter",
                       max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS, idle_timeout_ms: int = IDLE_TIMEOUT_MS,
                       late_records: str = "drop", late_output: str | None = None, workers: int = 1) -> JobSpec:
    windowed = Windowed(SlidingWindows(size_ms, slide_ms), aggregate=Count(), process=UrlWindowRow,
                        allowed_lateness_ms=allowed_lateness_ms)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("url_windows", (input_topic,), text_field("url"), windowed, output_topic,
                      on_error=ErrorPolicy(on_error), event_time=_event_time(max_out_of_orderness_ms, idle_timeout_ms),
                      late_records=LateRecords(late_records), late_output=late_output),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)


def windowed_top_urls(job_id: str = "access-log-windowed-top-urls", input_topic: str = "access-log",
                      channel_topic: str = "url-minute-counts", output_topic: str = "top-urls",
                      parallelism: int = 2, mode: str = "EXACTLY_ONCE", state_backend: str = "heap",
                      changelog: bool = False, on_error: str = "dead-letter", workers: int = 1,
                      max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS, idle_timeout_ms: int = IDLE_TIMEOUT_MS
                      ) -> JobSpec:
    policy = ErrorPolicy(on_error)
    minute = TumblingWindows(MINUTE_MS)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(
            Stage("minute_counts", (input_topic,), text_field("url"),
                  Windowed(minute, aggregate=Count(), process=MinuteCount), channel_topic, on_error=policy,
                  event_time=_event_time(max_out_of_orderness_ms, idle_timeout_ms)),
            Stage("top_urls", (channel_topic,), lambda v: int(v["minute"]), Windowed(minute, process=MinuteTop),
                  output_topic, on_error=policy),
        ),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend), changelog=changelog)
