"""Tidemark's side of ``bench/bench_windows.py``: hits per URL in one-minute tumbling windows of
event time, ``{"url", "start", "end", "hits"}`` once per window, when the watermark passes its end.

One keyed stage (by URL) running ``Windowed(TumblingWindows(window_ms), aggregate=Count(),
process=UrlWindowRow)`` (:mod:`tidemark.examples.access_log_windows`); event time is the record's
``ts`` with ``max_out_of_orderness_ms`` of disorder, and an input partition idle for
``idle_timeout_ms`` stops holding the watermark back (so the last windows close once the input
ends). The benchmark runs it as ``tidemark_windowed_counts:tumbling_url_counts`` with ``bench/`` on
the job's ``PYTHONPATH`` (the supervisor and its stage workers inherit it).
"""

from __future__ import annotations

from typing import Any

from tidemark.api import EventTime, JobSpec, Stage, StateBackendKind
from tidemark.examples.access_log import IDLE_TIMEOUT_MS, MINUTE_MS, OUT_OF_ORDERNESS_MS, event_ts
from tidemark.examples.access_log_windows import Count, UrlWindowRow
from tidemark.types import CheckpointingMode, JobId
from tidemark.windows import TumblingWindows, Windowed


def url_of(record: dict[str, Any]) -> str:
    url = record["url"]
    if not isinstance(url, str) or not url:
        raise ValueError(f"record has no url: {record!r}")
    return url


def tumbling_url_counts(job_id: str = "bench-tumbling-url-counts", input_topic: str = "access-log",
                        output_topic: str = "tumbling-url-counts", parallelism: int = 4, workers: int = 1,
                        mode: str = "EXACTLY_ONCE", state_backend: str = "rocksdb", window_ms: int = MINUTE_MS,
                        max_out_of_orderness_ms: int = OUT_OF_ORDERNESS_MS,
                        idle_timeout_ms: int = IDLE_TIMEOUT_MS) -> JobSpec:
    windowed = Windowed(TumblingWindows(window_ms), aggregate=Count(), process=UrlWindowRow)
    event_time = EventTime(timestamp=event_ts, max_out_of_orderness_ms=max_out_of_orderness_ms,
                           idle_timeout_ms=idle_timeout_ms)
    return JobSpec(
        job_id=JobId(job_id),
        stages=(Stage("url_windows", (input_topic,), url_of, windowed, output_topic, event_time=event_time),),
        mode=CheckpointingMode(mode), parallelism=parallelism, workers=workers,
        state_backend=StateBackendKind(state_backend))
