"""Event time and timers on the real pipeline: an input partition that never gets a record does not
stall the windows (it turns idle), a record behind the watermark is dropped and counted instead
of reopening its minute, and a processing-time timer fires with no new input at all."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipeline_support import TOP_URLS, pipeline, topics_for, verify_two_stage
from tidemark.examples.generator import generate, produce
from tidemark.examples.verify import read_committed
from tidemark.local.pipeline import json_events, stage_logs, wait_for

pytestmark = pytest.mark.timeout(600)

IP_SESSIONS = "tidemark.examples.access_log:ip_sessions"


def test_an_idle_partition_does_not_stall_the_window_and_late_records_are_dropped(tmp_path, kafka_bootstrap,
                                                                                 unique_name):
    topics = topics_for(unique_name)
    records = list(generate(1_500, seed=31, per_minute=300))  # 5 minutes of event time
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(TOP_URLS, topics.args(parallelism=2))
        produce(kafka_bootstrap, topics.input, records, 3)  # partitions 0..2: partition 3 stays empty
        verdict = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=300)
        # every minute before is closed: a record of the first minute is behind the watermark
        late = json.loads(records[0])
        produce(kafka_bootstrap, topics.input, [json.dumps(dict(late, url="/late")).encode()], 3)
        wait_for(lambda: [e for text in stage_logs(tmp_path / "home").values() for e in json_events(text)
                          if e.get("event") == "records behind the watermark"] or None, 120, "the late record")
        after = verify_two_stage(kafka_bootstrap, topics, records, timeout_s=30)
        job.stop()
    assert verdict.exactly_once, verdict
    assert verdict.records == verdict.expected_records == 4
    assert after.exactly_once, after  # the late record reopened no minute


def test_an_inactivity_timer_fires_without_new_input(tmp_path, kafka_bootstrap, unique_name):
    topics = topics_for(unique_name)
    records = list(generate(400, seed=32))
    requests = Counter(json.loads(r)["ip"] for r in records)
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        job = pipe.start_job(IP_SESSIONS, topics.single_stage_args(timeout_ms=4_000))
        wait_for(lambda: job.events("attempt registered"), 300, "the job running")
        produce(kafka_bootstrap, topics.input, records, 4)  # all at once, then nothing more
        sessions = read_committed(kafka_bootstrap, topics.output, expect=len(requests), timeout_s=120, settle_s=6)
        job.stop()
    closed = Counter(s["ip"] for s in sessions)
    assert set(closed) == set(requests) and set(closed.values()) == {1}, closed  # each session closed once
    assert {s["ip"]: s["requests"] for s in sessions} == dict(requests)
    assert all(s["first_ts"] <= s["last_ts"] for s in sessions)

