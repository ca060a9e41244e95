"""New versions of the example's two-stage job, started from a savepoint of
``tidemark.examples.access_log:top_urls`` by the e2e upgrade tests. Loaded by the job's processes
with this folder on ``PYTHONPATH`` (see ``UPGRADED_ENV``).

* ``top_urls_v2``: state compatible with the old job: the same stages (operator ids), keys and
  state descriptors, new code (the top-URLs function is rewritten, and the first stage reads
  smaller micro-batches);
* ``top_urls_renamed``: the second stage renamed (``top_urls`` -> ``top_urls_v2``), so the
  savepoint's state of ``top_urls`` is claimed by no stage;
* ``url_counts_renamed``: the count-per-URL job with its stage renamed (``count_hits`` ->
  ``url_hits``), started from a savepoint whose stage was renamed the same way
  (``tidemark state transform --rename-stage``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from tidemark.examples.access_log import TopUrls, top_urls, url_counts, window_end
from tidemark.api import JobSpec

UPGRADED_TOP_URLS = "upgraded_jobs:top_urls_v2"
RENAMED_TOP_URLS = "upgraded_jobs:top_urls_renamed"
RENAMED_URL_COUNTS = "upgraded_jobs:url_counts_renamed"
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


def top_urls_renamed(job_id: str, input_topic: str, channel_topic: str, output_topic: str,
                     parallelism: int = 2) -> JobSpec:
    spec = top_urls(job_id, input_topic, channel_topic, output_topic, parallelism)
    counts, tops = spec.stages
    return dataclasses.replace(spec, stages=(counts, dataclasses.replace(tops, name="top_urls_v2")))


def url_counts_renamed(job_id: str, input_topic: str, output_topic: str, parallelism: int = 2) -> JobSpec:
    spec = url_counts(job_id, input_topic, output_topic, parallelism)
    (counts,) = spec.stages
    return dataclasses.replace(spec, stages=(dataclasses.replace(counts, name="url_hits"),))
