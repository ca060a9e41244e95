"""A new version of the example's two-stage job whose state is compatible with the old one.

The e2e upgrade tests start it from a savepoint of ``tidemark.examples.access_log:top_urls``:
the same stages (operator ids), keys and state descriptors, new code (the top-URLs function is
rewritten, and the first stage reads smaller micro-batches). Loaded by the job's processes with
this folder on ``PYTHONPATH`` (see ``UPGRADED_ENV``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tidemark.examples.access_log import TopUrls, top_urls, window_end
from tidemark.runtime.api import JobSpec

UPGRADED_TOP_URLS = "upgraded_jobs:top_urls_v2"
UPGRADED_ENV = {"PYTHONPATH": str(Path(__file__).resolve().parent)}


class TopUrlsV2(TopUrls):
    """Same state ("url_hits" and the window timers), same results; the update is written another way."""

    def process(self, value: Any, ctx: Any) -> None:
        url, hits = value["url"], int(value["hits"])
        self.counts.put(url, max(hits, self.counts.get(url) or 0))
        ctx.timer_service().register_event_time_timer(window_end(int(ctx.key)))


def top_urls_v2(job_id: str, input_topic: str, channel_topic: str, output_topic: str,
                parallelism: int = 2) -> JobSpec:
    spec = top_urls(job_id, input_topic, channel_topic, output_topic, parallelism)
    counts, tops = spec.stages
    return dataclasses.replace(spec, stages=(dataclasses.replace(counts, max_records_per_batch=500),
                                             dataclasses.replace(tops, function=TopUrlsV2)))
