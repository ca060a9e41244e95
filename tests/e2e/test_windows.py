"""Windows end to end (issue #34): the sessionization job and a sliding-window job side by side on
one input, each SIGKILLed at the window's own fault points (during a window firing, during a
session merge) while input flows; then late records; then the sessions job stopped with a
savepoint and restored at another parallelism. (The fault points of a source stage's checkpoint
protocol, which a window stage shares with every other, are the SIGKILL tests' of
``test_exactly_once.py``, ``test_scale_out.py``, ``test_changelog_exactly_once.py`` and
``test_savepoints_and_modes.py``.)

* Exactly once and right: the read_committed output of each job holds every closed window once,
  equal to an independent computation from the input (``tidemark.examples.generator``), whatever
  the kills.
* Allowed lateness: a record behind the watermark whose sliding windows are closed but within
  the lateness fires them again with the updated counts; a record later than that reaches the
  job's late side output with its origin, and changes nothing.
* A session open at the savepoint fires once, right, after the restore at parallelism 3.

The window semantics themselves (assigners, triggers, merging, cleanup, rescale of open windows
on every backend) are proven with the test harness in ``tests/unit/windows``; this test shows
what only the whole pipeline can: the window operator's state, timers and firings across the
checkpoint protocol, failovers, idleness and a savepoint.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline_support import killed_at_every_point, pipeline, worker_deaths
from tidemark.examples.generator import final_watermark, generate, produce
from tidemark.examples.verify import read_committed, sessions_expectation, sliding_url_counts_expectation, verify_example
from tidemark.local.pipeline import InputFeeder
from tidemark.runtime.worker.late_records import ORIGIN_HEADER

pytestmark = pytest.mark.timeout(900)

SESSIONS = "tidemark.examples.access_log_windows:sessions"
SLIDING = "tidemark.examples.access_log_windows:sliding_url_counts"
GAP_MS = 90_000
SIZE_MS, SLIDE_MS, LATENESS_MS = 120_000, 60_000, 180_000
PER_MINUTE = 1_000  # records per minute of event time: an IP comes back about every minute, so sessions merge

# each job one worker, killed once per attempt at a window's own point
SESSION_KILLS = (
    "0@sessions@during-session-merge:60",  # a request extended a session: state and timers moved, not checkpointed
    "1@sessions@during-window-firing:4",  # a session emitted, its state not yet cleared
)
SLIDING_KILLS = (
    "0@url_windows@during-window-firing:30",  # windows emitted, mid-round
)


def test_session_and_sliding_windows_are_exactly_once_across_sigkills_lateness_and_a_rescale(
        tmp_path, kafka_bootstrap, unique_name):
    topic = unique_name("access-log")
    sessions_args = {"job_id": unique_name("sessions"), "input_topic": topic, "output_topic": unique_name("sessions"),
                     "gap_ms": GAP_MS}
    late_topic = unique_name("late-hits")
    sliding_args = {"job_id": unique_name("sliding"), "input_topic": topic, "output_topic": unique_name("windows"),
                    "size_ms": SIZE_MS, "slide_ms": SLIDE_MS, "allowed_lateness_ms": LATENESS_MS,
                    "late_records": "side-output", "late_output": late_topic}
    with pipeline(tmp_path, kafka_bootstrap, unique_name, env={"TIDEMARK_CHECKPOINT__INTERVAL_MS": "2500"}) as pipe:
        pipe.create_topic(topic, 4)
        pipe.create_topic(late_topic, 1)
        sessions = pipe.start_job(SESSIONS, sessions_args, faults=SESSION_KILLS, max_restarts=len(SESSION_KILLS) + 2)
        sliding = pipe.start_job(SLIDING, sliding_args, faults=SLIDING_KILLS, max_restarts=len(SLIDING_KILLS) + 2)
        all_killed = lambda: all(killed_at_every_point(job, kills)  # noqa: E731
                                 for job, kills in ((sessions, SESSION_KILLS), (sliding, SLIDING_KILLS)))
        feeder = InputFeeder(kafka_bootstrap, topic, total=3_000, chunk=200, pause_s=1.0, per_minute=PER_MINUTE,
                             until=all_killed).start()
        records = feeder.join(timeout_s=720)

        # 1. every window the input closes, once and right, whatever the kills
        expected_sessions = sessions_expectation(records, GAP_MS)
        expected_windows = sliding_url_counts_expectation(records, SIZE_MS, SLIDE_MS)
        assert len(expected_sessions) > 100 and len(expected_windows) > 50
        session_output = read_committed(kafka_bootstrap, sessions_args["output_topic"],
                                        expect=len(expected_sessions), timeout_s=300)
        window_output = read_committed(kafka_bootstrap, sliding_args["output_topic"],
                                       expect=len(expected_windows), timeout_s=300)
        session_verdict = verify_example("sessions", session_output, expected_sessions)
        window_verdict = verify_example("sliding_url_counts", window_output, expected_windows)
        deaths = [f["stage"] for job in (sessions, sliding) for f in worker_deaths(job)]

        # 2. a late record within the allowed lateness updates its closed windows; a later one goes aside
        watermark = final_watermark(records)
        in_time, in_time_windows = _late_within_lateness(watermark)
        too_late = {"ts": watermark - 10 * 60_000, "ip": "10.9.9.9", "method": "GET", "url": "/shop/0",
                    "status": 200, "bytes": 1}
        produce(kafka_bootstrap, topic, [json.dumps(in_time).encode(), json.dumps(too_late).encode()], 4)
        updated = {**expected_windows}
        for start in in_time_windows:
            before = updated.get(("/shop/0", start), {"url": "/shop/0", "start": start, "end": start + SIZE_MS, "hits": 0})
            updated[("/shop/0", start, "late")] = dict(before, hits=before["hits"] + 1)
        window_output = read_committed(kafka_bootstrap, sliding_args["output_topic"], expect=len(updated), timeout_s=120)
        late_aside = _read_with_headers(kafka_bootstrap, late_topic, expect=1)
        sliding.stop()

        # 3. the sessions job stopped with a savepoint, restored at parallelism 3, more input: open sessions fire once
        client = pipe.client()
        request = client.trigger_savepoint(sessions_args["job_id"], stop=True)
        done = client.wait_for_savepoint(sessions_args["job_id"], request["request_id"], timeout_s=120)
        assert done["status"] == "COMPLETED", done
        assert sessions.wait(timeout_s=120) == 0
        resumed = pipe.start_job(SESSIONS, sessions_args, parallelism=3, from_savepoint=done["metadata_path"])
        more = list(generate(1_500, seed=7, per_minute=PER_MINUTE, first=len(records)))
        produce(kafka_bootstrap, topic, more, 4)
        kept = [json.dumps(in_time).encode()] if in_time["ts"] + GAP_MS - 1 > watermark else []  # else late for sessions
        all_input = records + kept + more
        expected_after = sessions_expectation(all_input, GAP_MS)
        final_sessions = read_committed(kafka_bootstrap, sessions_args["output_topic"], expect=len(expected_after),
                                        timeout_s=300)
        [attempt, *_] = resumed.events("starting attempt")
        resumed.stop()

    assert sorted(deaths) == sorted(k.split("@")[1] for k in SESSION_KILLS + SLIDING_KILLS), deaths
    assert session_verdict.exactly_once and session_verdict.records == session_verdict.expected_records, session_verdict
    assert window_verdict.exactly_once and window_verdict.records == window_verdict.expected_records, window_verdict

    late_firings = [r for r in window_output if r["url"] == "/shop/0" and r["start"] in in_time_windows]
    assert sorted((r["start"], r["hits"]) for r in late_firings) == sorted(
        [(start, expected_windows[("/shop/0", start)]["hits"]) for start in in_time_windows] +
        [(start, expected_windows[("/shop/0", start)]["hits"] + 1) for start in in_time_windows])
    assert len(window_output) == len(updated), "nothing else fired again"
    [(value, headers)] = late_aside
    assert json.loads(value) == too_late and headers[ORIGIN_HEADER].startswith(f"{topic}/".encode())

    assert attempt["parallelism"] == 3 and attempt["restore"] == done["metadata_path"]
    verdict = verify_example("sessions", final_sessions, expected_after)
    assert verdict.exactly_once and verdict.records == verdict.expected_records, verdict
    assert len(expected_after) > len(expected_sessions)


def _late_within_lateness(watermark: int) -> tuple[dict, list[int]]:
    """A record of ``/shop/0`` behind ``watermark`` whose two sliding windows both fired (their
    ends are at or before the watermark) and are both within the allowed lateness; their starts."""
    latest_start = (watermark + 1 - SIZE_MS) // SLIDE_MS * SLIDE_MS  # the newest window that fired
    ts = latest_start + SLIDE_MS - 1  # in that window and in the one before it
    starts = [latest_start - SLIDE_MS, latest_start]
    assert all(start + SIZE_MS - 1 <= watermark < start + SIZE_MS - 1 + LATENESS_MS for start in starts)
    return {"ts": ts, "ip": "10.9.9.9", "method": "GET", "url": "/shop/0", "status": 200, "bytes": 1}, starts


def _read_with_headers(bootstrap: str, topic: str, expect: int, timeout_s: float = 60) -> list[tuple[bytes, dict]]:
    """The records of a one-partition topic written without transactions (a late side output),
    with their headers."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[tuple[bytes, dict]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(found) < expect and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found.append((message.value(), dict(message.headers() or [])))
        time.sleep(2)  # a duplicate arriving late would show
        while (message := consumer.poll(0.5)) is not None:
            if message.error() is None:
                found.append((message.value(), dict(message.headers() or [])))
    finally:
        consumer.close()
    return found
