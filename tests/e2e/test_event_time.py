"""Event time and timers on the real pipeline: an input partition that never gets a record does not
stall the windows (it turns idle), a record behind the watermark is dropped and counted instead
of reopening its minute, and a processing-time timer fires with no new input at all."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from pipeline_support import TOP_URLS, pipeline, topics_for, verify_two_stage
from tidemark.examples.generator import generate, produce
from tidemark.checkpoint_store.catalog import list_retained
from tidemark.checkpoint_store.persistent_store import read_metadata
from tidemark.examples.verify import read_committed
from tidemark.storage import open_storage
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


def test_an_inactivity_timer_fires_without_new_input_and_after_a_restore(tmp_path, kafka_bootstrap, unique_name):
    """The sessions of a first batch of records close by themselves (processing-time timers, no
    new input); those of a second batch fall due while the job is stopped with a savepoint, and
    close right after it resumes from it."""
    topics = topics_for(unique_name)
    first = list(generate(300, seed=32))
    second = list(generate(300, seed=33, first=300))
    with pipeline(tmp_path, kafka_bootstrap, unique_name) as pipe:
        pipe.create_topic(topics.input, 4)
        args = topics.single_stage_args(timeout_ms=4_000)
        job = pipe.start_job(IP_SESSIONS, args)
        wait_for(lambda: job.events("attempt registered"), 300, "the job running")
        produce(kafka_bootstrap, topics.input, first, 4)  # all at once, then nothing more
        closed_first = read_committed(kafka_bootstrap, topics.output, expect=len(_requests(first)), timeout_s=120,
                                      settle_s=6)
        produce(kafka_bootstrap, topics.input, second, 4)
        # read, its sessions' timers registered: a completed checkpoint is past every record (a
        # fixed wait here was too short for a loaded machine)
        wait_for(lambda: _newest_checkpoint_offsets(tmp_path, topics.job_id) == len(first) + len(second), 120,
                 "a checkpoint past every input record")
        client = pipe.client()
        request = client.trigger_savepoint(topics.job_id, stop=True)
        savepoint = client.wait_for_savepoint(topics.job_id, request["request_id"], timeout_s=120)
        assert job.wait(timeout_s=120) == 0
        stopped = read_committed(kafka_bootstrap, topics.output, expect=10**6, timeout_s=5, settle_s=0)
        time.sleep(5)  # every second-batch session falls due while the job is down
        resumed = pipe.start_job(IP_SESSIONS, args, from_savepoint=savepoint["metadata_path"])
        sessions = read_committed(kafka_bootstrap, topics.output,
                                  expect=len(_requests(first)) + len(_requests(second)), timeout_s=180, settle_s=6)
        resumed.stop()
    read = _source_offsets(tmp_path, savepoint["metadata_path"])
    assert read == len(first) + len(second), "the savepoint came before every record was read"
    assert _closed(closed_first) == _closed_sessions(first)  # each session closed once, with its requests
    assert len(stopped) == len(closed_first), "second-batch sessions closed before the savepoint"
    assert _closed(sessions) == _closed_sessions(first) + _closed_sessions(second)
    assert all(s["first_ts"] <= s["last_ts"] for s in sessions)


def _requests(records: list[bytes]) -> dict[str, int]:
    return dict(Counter(json.loads(r)["ip"] for r in records))


def _closed_sessions(records: list[bytes]) -> Counter[tuple[str, int]]:
    """The sessions ``records`` make: (ip, requests), one per IP."""
    return Counter(_requests(records).items())


def _closed(sessions: list[dict]) -> Counter[tuple[str, int]]:
    return Counter((s["ip"], s["requests"]) for s in sessions)


def _newest_checkpoint_offsets(tmp_path, job_id: str) -> int:
    """The input records the newest retained checkpoint's positions are past (0: none yet)."""
    storage = open_storage((tmp_path / "home" / "checkpoints").resolve().as_uri())
    entries = list_retained(storage, job_id, savepoints=False).entries
    return _source_offsets(tmp_path, entries[-1].path) if entries else 0


def _source_offsets(tmp_path, metadata_path: str) -> int:
    """How many input records the savepoint's positions are past (its sessions are in its state,
    not read again after the restore)."""
    storage = open_storage((tmp_path / "home" / "checkpoints").resolve().as_uri())
    metadata = read_metadata(storage, metadata_path)
    return sum(o.offset for t in metadata.tasks for o in t.source_offsets)
