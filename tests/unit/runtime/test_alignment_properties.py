"""The barrier aligner (``tidemark.runtime.worker.alignment``) over random interleavings of its
channels: each channel delivers its records and barriers 1..K in order, the channels in any
order. Exactly-once: no record is lost or processed twice, each channel's records keep their
order, and an ``Aligned(n)`` comes after every record before barrier ``n`` on every channel and
before any record after it; at-least-once: every record is processed once, in channel order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import pytest

from tidemark.protocol.messages import Barrier
from tidemark.runtime.job.records import InputRecord
from tidemark.runtime.worker.alignment import Aligned, BarrierAligner, Cancelled, Process
from tidemark.types import CheckpointId, CheckpointingMode, CheckpointType, Epoch, JobId, TaskId

pytestmark = pytest.mark.unit

CHANNELS = [("x", 0, TaskId("r#0")), ("x", 1, TaskId("r#0")), ("<local>", 0, TaskId("r#1"))]
CHECKPOINTS = 3


def _stream(channel, data_counts: list[int]) -> list[InputRecord]:
    """``data_counts[i]`` records, then barrier i + 1 (none after the last count)."""
    topic, partition, task = channel
    records, offset = [], 0
    for checkpoint, count in enumerate(data_counts, start=1):
        for _ in range(count):
            records.append(InputRecord(topic, partition, offset, 0, None, b"d", Epoch(1), task))
            offset += 1
        if checkpoint <= CHECKPOINTS:
            barrier = Barrier(JobId("j"), CheckpointId(checkpoint), CheckpointType.CHECKPOINT,
                              CheckpointingMode.EXACTLY_ONCE, task, 0, Epoch(1))
            records.append(InputRecord(topic, partition, offset, 0, None, b"", Epoch(1), task, barrier))
            offset += 1
    return records


@st.composite
def interleavings(draw):
    streams = [_stream(c, draw(st.lists(st.integers(0, 4), min_size=CHECKPOINTS + 1, max_size=CHECKPOINTS + 1)))
               for c in CHANNELS]
    order = draw(st.permutations([i for i, s in enumerate(streams) for _ in s]))
    positions = [0] * len(streams)
    fed = []
    for i in order:
        fed.append(streams[i][positions[i]])
        positions[i] += 1
    return streams, fed


def _key(record: InputRecord):
    return record.topic, record.partition, record.offset


@settings(max_examples=300, deadline=None)
@given(interleavings(), st.sampled_from(list(CheckpointingMode)))
def test_every_record_once_in_channel_order_and_each_aligned_checkpoint_cuts_at_its_barriers(case, mode) -> None:
    streams, fed = case
    aligner = BarrierAligner(mode, Epoch(1), set(CHANNELS))
    actions = [action for record in fed for action in aligner.feed(record, 0)]
    processed = [_key(a.record) for a in actions if isinstance(a, Process)]
    data = [_key(r) for s in streams for r in s if r.barrier is None]
    assert len(processed) == len(set(processed))  # nothing twice
    for stream in streams:  # each channel's records in its order (every one is processed by the end)
        channel = (stream[0].topic, stream[0].partition)
        assert [k for k in processed if k[:2] == channel] == [_key(r) for r in stream if r.barrier is None]
    if mode is CheckpointingMode.AT_LEAST_ONCE:
        assert sorted(processed) == sorted(data)
        assert [a.barrier.checkpoint_id for a in actions if isinstance(a, Aligned)] == list(range(1, CHECKPOINTS + 1))
        return
    cancelled = {a.checkpoint_id for a in actions if isinstance(a, Cancelled)}
    aligned = [a for a in actions if isinstance(a, Aligned)]
    assert {a.barrier.checkpoint_id for a in aligned} | cancelled == set(range(1, CHECKPOINTS + 1))
    assert CHECKPOINTS in {a.barrier.checkpoint_id for a in aligned}  # the last one is never overtaken
    assert sorted(processed) == sorted(data)  # the last alignment released everything held
    for a in aligned:
        before = {_key(r) for s in streams for r in s[:next(i for i, r in enumerate(s) if r.barrier is not None
                                                             and r.barrier.checkpoint_id == a.barrier.checkpoint_id)]
                  if r.barrier is None}
        done = {_key(x.record) for x in actions[:actions.index(a)] if isinstance(x, Process)}
        assert done == before  # exactly the records before barrier n on every channel
        assert a.cut == {c: next(r.offset for r in s if r.barrier is not None
                                 and r.barrier.checkpoint_id == a.barrier.checkpoint_id)
                         for c, s in zip(CHANNELS, streams)}
