"""The KeyedProcessFunction harness, on the example access-log functions and on a function using
every kind of keyed state: real heap and RocksDB backends, snapshots restored at other
parallelisms, TTL under a manual clock."""

from __future__ import annotations

import json
from typing import Any

import pytest

from state_processor_stage import Average
from tidemark.examples.access_log import MINUTE_MS, top_urls, url_counts
from tidemark.api import KeyedProcessFunction, json_encode
from tidemark.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
    assign_to_key_group,
)
from tidemark.testing import KeyedProcessFunctionHarness as Harness

BACKENDS = ["heap", "rocksdb"]
URLS = [f"/page/{i}" for i in range(12)]
HITS = ValueStateDescriptor("hits", default=0)


def access(url: str, ts: int = 0) -> dict[str, Any]:
    return {"ts": ts, "ip": "10.0.0.1", "method": "GET", "url": url, "status": 200, "bytes": 10}


def hits_by_url(values: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for value in values:
        out.setdefault(value["url"], []).append(value["hits"])
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_hits_counts_per_url_on_the_task_owning_the_key(backend: str) -> None:
    records = [access(URLS[i % 5]) for i in range(23)]
    with Harness.for_stage(url_counts(), "count_hits", parallelism=3, state_backend=backend) as harness:
        harness.process_all(records)
        assert hits_by_url(harness.output_values()) == {
            url: list(range(1, records.count(access(url)) + 1)) for url in URLS[:5]}
        for url in URLS[:5]:
            assert harness.state(HITS, url).value() == records.count(access(url))
            task = harness.task_for(url)
            assert assign_to_key_group(url, harness.max_parallelism) in task.key_groups
            assert {e.task for e in harness.output if e.key == url.encode()} == {task.task_id}
        assert len({harness.task_for(url).task_id for url in URLS}) == 3  # the keys spread over the tasks
        assert harness.state(HITS, "/never-seen").value() == 0


def test_records_from_kafka_are_decoded_and_keyed_like_the_worker_does() -> None:
    with Harness.for_stage(url_counts(), "count_hits") as harness:
        emitted = harness.process_record(None, json_encode(access("/cart")))
        assert [(e.key, json.loads(e.value)) for e in emitted] == [(b"/cart", {"hits": 1, "url": "/cart"})]
        with pytest.raises(ValueError, match="record has no url"):
            harness.process_record(None, json_encode(access("")))  # the worker dead-letters this one


@pytest.mark.parametrize("backend", BACKENDS)
def test_top_urls_two_stages_chained_through_their_encoded_records(backend: str) -> None:
    job = top_urls(state_backend=backend)
    minute = 5 * MINUTE_MS
    hits = {"/a": 4, "/b": 2, "/c": 3, "/d": 1}
    records = [access(url, minute + i) for url, n in hits.items() for i in range(n)]
    records.append(access("/a", minute + MINUTE_MS))  # the next minute
    with Harness.for_stage(job, "minute_counts") as counts, Harness.for_stage(job, "top_urls") as top:
        for record in records:
            for emitted in counts.process(record, timestamp_ms=record["ts"]):
                top.process_record(emitted.key, emitted.value, timestamp_ms=emitted.timestamp_ms)  # the channel's
        assert top.output == []  # a window emits when the watermark passes its end, not before
        end = minute + MINUTE_MS - 1
        counts.advance_watermark(end)
        closed = top.advance_watermark(end)
        assert [e.decoded() for e in closed] == [{"minute": minute, "top": [["/a", 4], ["/c", 3], ["/b", 2]]}]
        assert top.timers(minute + MINUTE_MS) == [minute + 2 * MINUTE_MS - 1]  # the next minute is open
        per_minute = counts.state(MapStateDescriptor("hits_per_minute"), "/a")
        assert dict(per_minute.items()) == {minute + MINUTE_MS: 1}  # the closed minute's count is dropped
        assert dict(top.state(MapStateDescriptor("url_hits"), minute).items()) == {}


@pytest.mark.parametrize(("before", "after"), [(1, 4), (4, 2), (3, 3), (2, 1)])
@pytest.mark.parametrize(("backend", "restored_backend"), [("heap", "heap"), ("rocksdb", "rocksdb"),
                                                           ("heap", "rocksdb")])
def test_a_snapshot_restores_into_a_fresh_harness_at_another_parallelism(
        before: int, after: int, backend: str, restored_backend: str) -> None:
    job = url_counts()
    first = [access(URLS[i % len(URLS)]) for i in range(40)]
    with Harness.for_stage(job, "count_hits", parallelism=before, state_backend=backend) as harness:
        harness.process_all(first)
        snapshot = harness.snapshot()
        harness.process(access(URLS[0]))  # after the snapshot: not in it
    assert snapshot.path == "access-log-counts/savepoints/sp-1/_metadata"
    assert [t.subtask_index for t in snapshot.metadata.tasks] == list(range(before))
    restored = Harness.for_stage(job, "count_hits", parallelism=after, state_backend=restored_backend)
    with restored.restore(snapshot):
        assert restored.restored_from == snapshot.metadata
        for url in URLS:
            assert restored.state(HITS, url).value() == first.count(access(url))
        restored.process_all([access(url) for url in URLS])
        assert hits_by_url(restored.output_values()) == {url: [first.count(access(url)) + 1] for url in URLS}


def test_restoring_checks_what_it_restores() -> None:
    with Harness.for_stage(url_counts(), "count_hits") as harness:
        harness.process(access("/x"))
        snapshot = harness.snapshot(checkpoint_id=7)
        assert snapshot.path.endswith("/sp-7/_metadata")
    with pytest.raises(ValueError, match="holds no state of stage 'minute_counts'"):
        Harness.for_stage(top_urls(), "minute_counts").restore(snapshot)
    with pytest.raises(ValueError, match="max parallelism 128, the harness 64"):
        Harness(url_counts().stage("count_hits"), max_parallelism=64).restore(snapshot)
    opened = Harness.for_stage(url_counts(), "count_hits").open()
    with pytest.raises(RuntimeError, match="before open"):
        opened.restore(snapshot)
    opened.close()


# ---------------------------------------------------------------------- every state kind, TTL


LAST_SEEN = ValueStateDescriptor("last_seen", ttl=StateTtlConfig(ttl_seconds=60))
STATUSES = ListStateDescriptor("statuses")
BY_METHOD = MapStateDescriptor("by_method")
TOTAL_BYTES = ReducingStateDescriptor("total_bytes", lambda a, b: a + b)
AVERAGE_BYTES = AggregatingStateDescriptor("average_bytes", Average())


class ClientProfile(KeyedProcessFunction):
    """Per client IP: every kind of keyed state; ``last_seen`` expires after a minute."""

    def open(self, ctx: Any) -> None:
        self.last_seen = ctx.get_state(LAST_SEEN)
        self.statuses = ctx.get_state(STATUSES)
        self.by_method = ctx.get_state(BY_METHOD)
        self.total = ctx.get_state(TOTAL_BYTES)
        self.average = ctx.get_state(AVERAGE_BYTES)

    def process(self, value: Any, ctx: Any) -> None:
        returning = self.last_seen.value() is not None
        self.last_seen.update(ctx.timestamp_ms)
        self.statuses.add(value["status"])
        self.by_method.put(value["method"], (self.by_method.get(value["method"]) or 0) + 1)
        self.total.add(value["bytes"])
        self.average.add(value["bytes"])
        ctx.emit(ctx.key, {"ip": ctx.key, "returning": returning, "total": self.total.get()})


def request(ip: str, method: str = "GET", status: int = 200, size: int = 100) -> dict[str, Any]:
    return {"ip": ip, "method": method, "status": status, "bytes": size}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_state_kind_and_ttl_under_the_manual_clock(backend: str) -> None:
    harness = Harness.for_function(ClientProfile, lambda v: v["ip"], name="profile", parallelism=2,
                                   state_backend=backend)
    with harness:
        harness.process(request("10.0.0.1", size=100))
        harness.clock.advance(30_000)
        harness.process(request("10.0.0.1", "POST", 500, 300))
        assert harness.state(LAST_SEEN, "10.0.0.1").value() == 30_000  # the record's time is the clock's
        assert harness.state(STATUSES, "10.0.0.1").get() == [200, 500]
        assert dict(harness.state(BY_METHOD, "10.0.0.1").items()) == {"GET": 1, "POST": 1}
        assert harness.state(TOTAL_BYTES, "10.0.0.1").get() == 400
        assert harness.state(AVERAGE_BYTES, "10.0.0.1").get() == 200.0
        harness.clock.advance(59_999)
        assert harness.state(LAST_SEEN, "10.0.0.1").value() == 30_000  # written at 30 s: alive until 90 s
        snapshot = harness.snapshot()
        harness.clock.advance(1)
        assert harness.state(LAST_SEEN, "10.0.0.1").value() is None  # expired, the rest stays
        assert harness.state(TOTAL_BYTES, "10.0.0.1").get() == 400
        harness.process(request("10.0.0.1"))
        assert [v["returning"] for v in harness.output_values()] == [False, True, False]
    restored = Harness.for_function(ClientProfile, lambda v: v["ip"], name="profile", parallelism=3,
                                    state_backend=backend)
    restored.clock.set(89_999)
    with restored.restore(snapshot):
        assert restored.state(LAST_SEEN, "10.0.0.1").value() == 30_000
        assert restored.state(AVERAGE_BYTES, "10.0.0.1").get() == 200.0
        restored.clock.set(90_000)
        assert restored.cleanup_expired_state() == 1
        assert restored.state(LAST_SEEN, "10.0.0.1").value() is None
        assert restored.state(STATUSES, "10.0.0.1").get() == [200, 500]


SEEN_ONCE = ValueStateDescriptor("seen", ttl=StateTtlConfig(ttl_seconds=10))


class FirstVisit(KeyedProcessFunction):
    """Remembers each client for 10 s; most are never seen again, so no read ever removes them."""

    def open(self, ctx: Any) -> None:
        self.seen = ctx.get_state(SEEN_ONCE)

    def process(self, value: Any, ctx: Any) -> None:
        if self.seen.value() is None:
            ctx.emit(ctx.key, {"ip": ctx.key})
        self.seen.update(True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_never_seen_again_leave_the_state_with_the_ticks_not_only_at_a_full_scan(backend: str) -> None:
    """A running task cleans TTL state a bounded number of values per batch and tick
    (``StageTask.clean_up_expired``), as the harness's ``advance_processing_time`` does: 5,000 keys
    written once are gone after a few ticks past their TTL, with nothing left for a full scan."""
    harness = Harness.for_function(FirstVisit, lambda v: v["ip"], name="first_visit", parallelism=2,
                                   state_backend=backend)
    with harness:
        harness.process_all(request(f"10.0.{i // 250}.{i % 250}") for i in range(5000))
        harness.advance_processing_time(9_999)
        assert harness.state(SEEN_ONCE, "10.0.0.1").value() is True  # nothing expired yet: nothing removed
        for _ in range(3):  # 2,500 keys per task, 2,000 values a tick
            harness.advance_processing_time(1)
        assert harness.cleanup_expired_state() == 0  # the ticks removed every one
        harness.process(request("10.0.0.1"))
        assert harness.output_values()[-1] == {"ip": "10.0.0.1"}  # a new visit after its TTL


def test_the_harness_must_be_open_to_process() -> None:
    harness = Harness.for_stage(url_counts(), "count_hits")
    with pytest.raises(RuntimeError, match="open"):
        harness.process(access("/a"))
    harness.open()
    harness.process(access("/a"), key="/other", timestamp_ms=5)  # an explicit key wins over key_by
    assert harness.state(HITS, "/other").value() == 1 and harness.state(HITS, "/a").value() == 0
    harness.close()
    with pytest.raises(RuntimeError, match="open"):
        harness.process(access("/a"))


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_the_testing_guide_failover_example_holds(backend: str) -> None:
    """docs/guide/testing.md: a checkpoint of the changelog backend restored after the attempt died."""
    from tidemark.testing.changelog import InMemoryChangelogTopic

    topic = InMemoryChangelogTopic("counts.changelog", partitions=2)
    first = Harness.for_stage(url_counts(), "count_hits", changelog=topic, state_backend=backend).open()
    first.process({"url": "/a"})
    checkpoint = first.snapshot(1, savepoint=False)
    assert checkpoint.metadata.tasks[0].changelog_ranges  # the state is in the changelog
    first.close()
    second = Harness.for_stage(url_counts(), "count_hits", changelog=topic, state_backend=backend)
    with second.restore(checkpoint):
        assert second.process({"url": "/a"})[0].decoded() == {"url": "/a", "hits": 2}
