"""Watermarks of a stage worker (tidemark.runtime.worker.watermarks): per partition with bounded
out-of-orderness and idleness, per channel, the one combination rule, and their snapshots."""

from __future__ import annotations

import json

from tidemark.api import NO_WATERMARK, EventTime
from tidemark.runtime.worker.watermarks import ChannelWatermarks, SourceWatermarks, Unread, WatermarkStatus, combine
from tidemark.types import CheckpointId, TaskId

A, B, C = ("in", 0), ("in", 1), ("in", 2)


def _answer(asked_ms: float, *unread: tuple[str, int]) -> Unread:
    """The end offsets asked at ``asked_ms`` (the broker answering all along) show ``unread``."""
    return Unread(frozenset(unread), asked_ms=asked_ms)


def test_combine_is_the_minimum_over_active_inputs_and_the_maximum_when_all_are_idle() -> None:
    assert combine([WatermarkStatus(5), WatermarkStatus(3), WatermarkStatus(9, idle=True)]) == WatermarkStatus(3)
    assert combine([WatermarkStatus(5, idle=True), WatermarkStatus(3, idle=True)]) == WatermarkStatus(5, idle=True)
    assert combine([]) == WatermarkStatus(NO_WATERMARK, idle=True)


def test_a_partition_watermark_trails_its_largest_event_time_by_the_bound_plus_one() -> None:
    source = SourceWatermarks(EventTime(max_out_of_orderness_ms=100), [A])
    source.observe(A, 1_000, now_ms=0)
    source.observe(A, 900, now_ms=0)  # out of order: the largest counts
    assert source.update(now_ms=0) == WatermarkStatus(899)


def test_the_slowest_partition_holds_the_watermark_back_until_it_is_idle() -> None:
    source = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B])
    assert source.update(now_ms=0, unread=_answer(0)).watermark == NO_WATERMARK  # idleness counts from the first update
    source.observe(A, 10_000, now_ms=100)
    assert source.update(now_ms=500, unread=_answer(500)).watermark == NO_WATERMARK  # B never had a record, not idle yet
    source.observe(A, 20_000, now_ms=1_200)
    assert source.update(now_ms=1_200, unread=_answer(1_200)) == WatermarkStatus(19_999)  # B idle: A alone
    source.observe(B, 5_000, now_ms=1_300)  # B wakes up, behind: the watermark does not go back
    assert source.update(now_ms=1_300, unread=_answer(1_300)) == WatermarkStatus(19_999)
    source.observe(B, 30_000, now_ms=1_400)
    source.observe(A, 40_000, now_ms=1_400)
    assert source.update(now_ms=1_400, unread=_answer(1_400)) == WatermarkStatus(29_999)


def test_when_every_partition_is_idle_the_watermark_is_the_largest() -> None:
    source = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B, C])
    source.update(now_ms=0, unread=_answer(0))
    source.observe(A, 7_000, now_ms=10)
    source.observe(B, 9_000, now_ms=10)
    assert source.update(now_ms=500, unread=_answer(500)) == WatermarkStatus(NO_WATERMARK)  # C never read, not idle yet
    assert source.update(now_ms=2_000, unread=_answer(2_000)) == WatermarkStatus(8_999, idle=True)


def test_without_an_idle_timeout_an_empty_partition_holds_the_watermark_forever() -> None:
    source = SourceWatermarks(EventTime(), [A, B])
    source.observe(A, 7_000, now_ms=0)
    assert source.update(now_ms=10**9, unread=_answer(10**9)).watermark == NO_WATERMARK


def test_a_partition_with_unread_records_is_never_idle() -> None:
    """A worker that has not read a partition's backlog yet (starting, or behind) must not let
    the watermark run ahead of it: those records would all be late."""
    source = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B])
    source.update(now_ms=0, unread=None)
    source.observe(A, 50_000, now_ms=0)
    assert source.update(now_ms=5_000, unread=_answer(5_000, B)).watermark == NO_WATERMARK  # B has a backlog
    assert source.update(now_ms=5_000, unread=None).watermark == NO_WATERMARK  # ends not known yet
    source.observe(B, 20_000, now_ms=5_100)
    assert source.update(now_ms=5_100, unread=_answer(5_100, B)).watermark == 19_999
    assert source.update(now_ms=6_100, unread=_answer(6_100)) == WatermarkStatus(49_999, idle=True)


def test_silence_while_the_unread_records_are_not_known_does_not_count_toward_idleness() -> None:
    """A broker outage: nothing arrives and the ends are not known. Right after it, the
    producers' backlog is still to come, so a partition silent through the outage is not idle
    until it has been silent for the timeout with the ends known."""
    source = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B])
    source.update(now_ms=0, unread=_answer(0))
    source.observe(A, 50_000, now_ms=0)
    source.observe(B, 20_000, now_ms=0)
    assert source.update(now_ms=500, unread=_answer(500)).watermark == 19_999
    for now_ms in range(1_000, 9_000, 100):  # the outage
        assert source.update(now_ms=now_ms, unread=None).watermark == 19_999
    assert source.update(now_ms=9_000, unread=_answer(9_000)).watermark == 19_999  # ends known again: not idle yet
    assert source.update(now_ms=9_800, unread=_answer(9_800)).watermark == 19_999
    source.observe(B, 30_000, now_ms=9_850)  # the backlog arrives
    assert source.update(now_ms=9_850, unread=_answer(9_850)).watermark == 29_999
    assert source.update(now_ms=10_900, unread=_answer(10_900)) == WatermarkStatus(49_999, idle=True)


def test_source_snapshot_restores_the_largest_event_times_and_the_floor() -> None:
    source = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B])
    source.update(now_ms=0, unread=_answer(0))
    source.observe(A, 10_000, now_ms=0)
    source.observe(B, 4_000, now_ms=0)
    source.observe(A, 12_000, now_ms=1_500)
    assert source.update(now_ms=1_500, unread=_answer(1_500)).watermark == 11_999  # B idle
    item = source.snapshot_item(worker=0)

    restored = SourceWatermarks(EventTime(idle_timeout_ms=1_000), [A, B])
    restored.restore([item, item])  # union state: every task sees it
    assert restored.watermark == 11_999  # time does not go back, though B (3_999) is active again
    assert restored.update(now_ms=0, unread=_answer(0)).watermark == 11_999
    restored.observe(B, 20_000, now_ms=10)
    assert restored.update(now_ms=10, unread=_answer(10)).watermark == 11_999  # min(A 11_999, B 19_999)


def test_restoring_items_of_several_old_workers_keeps_the_smallest_floor_and_only_own_partitions() -> None:
    items = [json.dumps({"worker": 0, "floor": 500, "partitions": [["in", 0, 900]]}).encode(),
             json.dumps({"worker": 1, "floor": 300, "partitions": [["in", 1, 700], ["in", 2, 650]]}).encode()]
    restored = SourceWatermarks(EventTime(), [A, B])
    restored.restore(items)
    assert restored.watermark == 300
    assert restored.update(now_ms=0).watermark == 699  # min(899, 699); C is not this worker's


T1, T2 = TaskId("up#0"), TaskId("up#1")
CH1, CH2 = ("ch", 0, T1), ("ch", 0, T2)


def test_a_channel_stage_watermark_is_the_minimum_over_its_channels() -> None:
    channels = ChannelWatermarks([CH1, CH2])
    assert channels.update(CH1, WatermarkStatus(100)) is None  # CH2 has none yet: no move
    assert channels.update(CH2, WatermarkStatus(50)) == WatermarkStatus(50)
    assert channels.update(CH2, WatermarkStatus(150)) == WatermarkStatus(100)
    assert channels.update(CH2, WatermarkStatus(40)) is None  # a channel's watermark never goes back
    assert channels.update(("ch", 1, T1), WatermarkStatus(10**6)) is None  # not this worker's channel


def test_idle_upstream_tasks_stop_holding_the_channel_watermark_back() -> None:
    channels = ChannelWatermarks([CH1, CH2])
    channels.update(CH1, WatermarkStatus(100))
    assert channels.update(CH2, WatermarkStatus(NO_WATERMARK, idle=True)) == WatermarkStatus(100)
    assert channels.update(CH1, WatermarkStatus(300, idle=True)) == WatermarkStatus(300, idle=True)


def test_a_channel_idle_behind_its_upstream_tasks_newest_watermark_is_read_less_far_and_holds_time() -> None:
    """One upstream worker (tasks T1, T2) went idle at 1_000 and woke up: it wrote records of
    event time 1_500 into both partitions, then 5_000 into each. This stage read partition 0 to
    the end but partition 1 only to the idle marks: the records behind them must not be late."""
    p0 = [("ch", 0, T1), ("ch", 0, T2)]
    p1 = [("ch", 1, T1), ("ch", 1, T2)]
    channels = ChannelWatermarks([*p0, *p1])
    for channel in [*p0, *p1]:
        channels.update(channel, WatermarkStatus(1_000, idle=True))
    assert channels.current == WatermarkStatus(1_000, idle=True)
    for channel in p0:
        channels.update(channel, WatermarkStatus(5_000))
    assert channels.watermark == 1_000  # partition 1's records at 1_500 are still to come
    for channel in p1:
        channels.update(channel, WatermarkStatus(5_000))
    assert channels.current == WatermarkStatus(5_000)
    for channel in p0:  # idle again, and partition 0 read to the mark first
        channels.update(channel, WatermarkStatus(9_000, idle=True))
    assert channels.current == WatermarkStatus(5_000)
    for channel in p1:
        channels.update(channel, WatermarkStatus(9_000, idle=True))
    assert channels.current == WatermarkStatus(9_000, idle=True)


def test_a_channel_snapshot_holds_the_watermarks_at_the_barriers() -> None:
    channels = ChannelWatermarks([CH1, CH2])
    channels.update(CH1, WatermarkStatus(100))
    channels.update(CH2, WatermarkStatus(80))
    channels.barrier(CH1, CheckpointId(7))
    channels.update(CH1, WatermarkStatus(500))  # past CH1's barrier (at-least-once: not held back)
    channels.barrier(CH2, CheckpointId(7))
    item = json.loads(channels.snapshot_item(worker=0, checkpoint_id=CheckpointId(7)))
    assert item["channels"] == [["ch", 0, "up#0", 100], ["ch", 0, "up#1", 80]]
    assert item["floor"] == 80

    restored = ChannelWatermarks([CH1, CH2])
    restored.restore([json.dumps(item).encode()])
    assert restored.watermark == 80
    assert restored.update(CH2, WatermarkStatus(90)) == WatermarkStatus(90)  # CH1 back at 100, not 500
