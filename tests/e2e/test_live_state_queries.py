"""Live state queries of a running job under load (issue #36): the count-per-URL job on two worker
processes (one task each) counts input written all along, while 1,000 queries of random URLs'
``hits`` go through the coordinator's API, 8 at a time. Each reply must agree with the job's own
output at that moment: at least the URL's last committed count read before the query (the
exactly-once output commits a checkpoint's counts only when it completes: a reply is the task's
state after its last micro-batch, ahead of it) and at most the URL's records written to the input
so far (read after the reply; plus the one chunk the feeder may have written and not yet noted).
Bad keys, stages, states and tokens get 4xx. The latencies' p50 and p99 are printed."""

from __future__ import annotations

import bisect
import itertools
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline_support import URL_COUNTS, pipeline, topics_for
from tidemark.admin.client import ApiError, CoordinatorClient
from tidemark.examples.generator import URLS, generate
from tidemark.kafka.clients import consumer_config
from tidemark.local.pipeline import InputFeeder, wait_for

pytestmark = pytest.mark.timeout(600)

TOKEN = "live-queries-e2e-token-8c21"
QUERIES = 1000
CHUNK = 100
STAGE = "count_hits"


class CommittedCounts:
    """The newest committed count of each URL in the job's output, read all along (read_committed)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.counts: dict[str, int] = {}
        self._consumer = Consumer(consumer_config({"bootstrap.servers": bootstrap}, None))
        self._topic = topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committed-counts", daemon=True)

    def start(self) -> CommittedCounts:
        partitions = wait_for(lambda: self._consumer.list_topics(self._topic, timeout=5).topics[self._topic].partitions,
                              timeout_s=120, what="the output topic")
        self._consumer.assign([TopicPartition(self._topic, p, 0) for p in partitions])
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for record in self._consumer.consume(500, timeout=0.1):
                if record.error() is None and record.value() is not None:
                    value = json.loads(record.value())
                    self.counts[value["url"]] = max(self.counts.get(value["url"], 0), value["hits"])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def test_a_thousand_live_queries_agree_with_the_committed_output_and_the_input(tmp_path, kafka_bootstrap,
                                                                              unique_name):
    topics = topics_for(unique_name)
    source = list(itertools.islice(generate(10**9, 7, per_minute=250), 100_000))  # what the feeder writes, in order
    positions: dict[str, list[int]] = {}
    for index, record in enumerate(source):
        positions.setdefault(json.loads(record)["url"], []).append(index)
    with pipeline(tmp_path, kafka_bootstrap, unique_name, api_token=TOKEN) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(URL_COUNTS, topics.single_stage_args(parallelism=2, workers=2))
        done = threading.Event()
        feeder = InputFeeder(kafka_bootstrap, topics.input, total=0, chunk=CHUNK, pause_s=1.0,
                             until=done.is_set).start()
        committed = CommittedCounts(kafka_bootstrap, topics.output).start()
        client = CoordinatorClient(pipe.coordinator_url, TOKEN, timeout_s=30)
        try:
            wait_for(lambda: len(committed.counts) >= 10, timeout_s=240, what="committed counts of 10 URLs")

            def upper_bound(url: str) -> int:
                written = len(feeder.records) + CHUNK  # a chunk may be written before the feeder notes it
                return bisect.bisect_left(positions[url], written)

            def ask(url: str) -> tuple[str, int, int, object, float]:
                lower = committed.counts.get(url, 0)
                started = time.monotonic()
                try:
                    reply: object = client.state_value(topics.job_id, STAGE, "hits", url)["value"]
                except ApiError as exc:
                    reply = exc
                took = time.monotonic() - started
                return url, lower, upper_bound(url), reply, took

            rng = random.Random(36)
            keys = [rng.choice(sorted(committed.counts)) for _ in range(QUERIES)]
            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                replies = list(pool.map(ask, keys))
            elapsed = time.monotonic() - started

            def status(*args: str, key_type: str | None = None, token: str = TOKEN) -> int | None:
                try:
                    CoordinatorClient(pipe.coordinator_url, token).state_value(*args, key_type=key_type)
                except ApiError as exc:
                    return exc.status
                return 200

            known = keys[0]
            bad = {"unknown key": status(topics.job_id, STAGE, "hits", "/no/such/url"),
                   "unknown state": status(topics.job_id, STAGE, "visits", known),
                   "unknown stage": status(topics.job_id, "top_urls", "hits", known),
                   "unknown job": status("no-such-job", STAGE, "hits", known),
                   "key not an int": status(topics.job_id, STAGE, "hits", "x", key_type="int"),
                   "wrong token": status(topics.job_id, STAGE, "hits", known, token="not-the-token-0000")}
        finally:
            done.set()
            committed.stop()
        records = feeder.join(timeout_s=60)
        job.stop()

    failed = [r for r in replies if not isinstance(r[3], int)]
    assert not failed, failed[:5]
    outside = [r for r in replies if not r[1] <= r[3] <= r[2]]
    assert not outside, outside[:5]
    assert records == source[:len(records)]  # the bound's input is what was written
    assert sum(1 for r in replies if r[3] > r[1]) > 0  # some replies were ahead of the committed output
    assert bad == {"unknown key": 404, "unknown state": 404, "unknown stage": 404, "unknown job": 404,
                   "key not an int": 400, "wrong token": 401}
    latencies = sorted(r[4] for r in replies)
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1]
    print(f"{QUERIES} live queries, 8 at a time, in {elapsed:.1f} s while {len(records)} records were counted: "
          f"p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; {len(set(keys))} URLs of {len(URLS)}")
